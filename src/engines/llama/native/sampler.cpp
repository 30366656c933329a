// Token sampling for the plain generation loop (src/engines/llama/plain.ts):
//   createSampler(model, context, { temperature, topK, topP, seed }) ->
//     { setBias(tokens: Uint32Array, logits: Float32Array), dispose() }
//   sampleMany(samplers, batchLogitIndexes: Int32Array) -> Int32Array (token, or -1: no logits or a disposed sampler)
// node-llama-cpp samples each sequence's next token in an async worker after every decode step,
// rebuilding and re-applying its sampler configuration in JavaScript first; with eight streams that
// took ~1.9 ms between steps of ~30 ms on a 2-core box (issue "chat throughput"). This builds
// llama.cpp's sampler chain once per request, in the order node-llama-cpp's AddonSampler builds its
// own (logit bias, then greedy, or top-k, top-p, temperature and a seeded distribution), so
// a seeded request draws the same tokens either way. The logit bias is kept apart from the chain
// so it can change between steps.
//
// sampleMany samples all sequences of a decode step in one call, on the calling thread while the
// work is small, and spread over threads when it is not: a real vocabulary (~150k tokens) costs
// ~0.5 ms a token, 16 ms a step for 32 streams if done one by one (llama-server's way).

#include <napi.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "llama.h"
#include "nlc.h"

namespace {

struct Sampler {
    llama_context * ctx = nullptr;
    const llama_vocab * vocab = nullptr;
    llama_sampler * bias = nullptr;   // logit bias, applied first; null when none
    llama_sampler * chain = nullptr;  // the rest

    void free_all() {
        if (bias) llama_sampler_free(bias);
        if (chain) llama_sampler_free(chain);
        bias = nullptr;
        chain = nullptr;
    }
};

// The logits one sample reads: the full row, or the candidates a backend sampler left (as
// node-llama-cpp's AddonSampler::setTokenCandidates reads them).
struct Row {
    const float * logits = nullptr;
    const llama_token * ids = nullptr;  // null: ids are 0..n-1
    const float * probs = nullptr;
    uint32_t n = 0;
};

// Read on the calling thread: llama_get_*_ith synchronize the context and reorder its outputs.
Row row_of(llama_context * ctx, const llama_vocab * vocab, int32_t i) {
    Row r;
    if (const float * probs = llama_get_sampled_probs_ith(ctx, i)) {
        r.probs = probs;
        r.logits = llama_get_sampled_logits_ith(ctx, i);
        r.ids = llama_get_sampled_candidates_ith(ctx, i);
        r.n = r.logits && r.ids ? llama_get_sampled_probs_count_ith(ctx, i) : 0;
    } else if (const float * sampled = llama_get_sampled_logits_ith(ctx, i)) {
        r.logits = sampled;
        r.ids = llama_get_sampled_candidates_ith(ctx, i);
        r.n = r.ids ? llama_get_sampled_logits_count_ith(ctx, i) : 0;
    } else if (const float * logits = llama_get_logits_ith(ctx, i)) {
        r.logits = logits;
        r.n = (uint32_t) llama_vocab_n_tokens(vocab);
    }
    return r;
}

// Any thread: reads only `row` and the sampler's own state.
llama_token sample_row(Sampler * s, const Row & row) {
    if (!s || row.n == 0) return -1;
    thread_local std::vector<llama_token_data> candidates;
    candidates.resize(row.n);
    for (uint32_t k = 0; k < row.n; k++)
        candidates[k] = llama_token_data{row.ids ? row.ids[k] : (llama_token) k, row.logits[k], row.probs ? row.probs[k] : 0.0f};
    llama_token_data_array cur{candidates.data(), (size_t) row.n, -1, false};
    if (s->bias) llama_sampler_apply(s->bias, &cur);
    llama_sampler_apply(s->chain, &cur);
    if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) return -1;
    return cur.data[cur.selected].id;
}

/** Candidates sampled per thread before another thread is worth starting (~0.25 ms of work). */
constexpr size_t WORK_PER_THREAD = 256 * 1024;

float number_or(const Napi::Object & o, const char * key, float fallback) {
    Napi::Value v = o.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().FloatValue() : fallback;
}

Sampler * live_sampler(const Napi::Env & env, Napi::Value handle) {
    if (!handle.IsObject()) return nullptr;
    Napi::Value ext = handle.As<Napi::Object>().Get("native");
    if (!ext.IsExternal()) return nullptr;
    auto * s = ext.As<Napi::External<Sampler>>().Data();
    return s && s->chain ? s : nullptr;
}

Napi::Value SetBias(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    auto * s = static_cast<Sampler *>(info.Data());
    if (!s->chain) {
        Napi::Error::New(env, "the sampler is disposed").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    if (!info[0].IsTypedArray() || !info[1].IsTypedArray()) {
        Napi::TypeError::New(env, "setBias(tokens: Uint32Array, logits: Float32Array)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    auto tokens = info[0].As<Napi::Uint32Array>();
    auto logits = info[1].As<Napi::Float32Array>();
    if (tokens.ElementLength() != logits.ElementLength()) {
        Napi::RangeError::New(env, "setBias: as many logits as tokens").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    const int32_t n_vocab = llama_vocab_n_tokens(s->vocab);
    std::vector<llama_logit_bias> biases;
    for (size_t i = 0; i < tokens.ElementLength(); i++) {
        if (tokens[i] >= (uint32_t) n_vocab) {
            Napi::RangeError::New(env, "setBias: token " + std::to_string(tokens[i]) + " is outside the vocabulary").ThrowAsJavaScriptException();
            return env.Undefined();
        }
        biases.push_back(llama_logit_bias{(llama_token) tokens[i], logits[i]});
    }
    // llama.cpp copies the list into the sampler
    if (s->bias) llama_sampler_free(s->bias);
    s->bias = biases.empty() ? nullptr : llama_sampler_init_logit_bias(n_vocab, (int32_t) biases.size(), biases.data());
    return env.Undefined();
}

Napi::Value SampleMany(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (!info[0].IsArray() || !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
        Napi::TypeError::New(env, "sampleMany(samplers, batchLogitIndexes: Int32Array)").ThrowAsJavaScriptException();
        return env.Null();
    }
    auto list = info[0].As<Napi::Array>();
    auto indexes = info[1].As<Napi::Int32Array>();
    const size_t n = list.Length();
    if (indexes.ElementLength() != n) {
        Napi::RangeError::New(env, "sampleMany: one batch logit index per sampler").ThrowAsJavaScriptException();
        return env.Null();
    }
    std::vector<Sampler *> samplers(n);
    std::vector<Row> rows(n);
    size_t work = 0;
    for (size_t k = 0; k < n; k++) {
        // one disposed sampler gets -1 (its caller fails), not the others of the step
        samplers[k] = live_sampler(env, list.Get((uint32_t) k));
        if (samplers[k]) rows[k] = row_of(samplers[k]->ctx, samplers[k]->vocab, indexes[k]);
        work += rows[k].n;
    }
    auto out = Napi::Int32Array::New(env, n);
    // asked once: libstdc++ reads /sys (a file open and read) on every call, ~50 us a step
    static const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    const size_t threads = std::min({n, cores, std::max<size_t>(1, work / WORK_PER_THREAD)});
    if (threads <= 1) {
        for (size_t k = 0; k < n; k++) out[k] = sample_row(samplers[k], rows[k]);
        return out;
    }
    std::vector<llama_token> tokens(n);
    auto run = [&](size_t t) {
        for (size_t k = t; k < n; k += threads) tokens[k] = sample_row(samplers[k], rows[k]);
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; t++) pool.emplace_back(run, t);
    run(0);
    for (auto & th : pool) th.join();
    for (size_t k = 0; k < n; k++) out[k] = tokens[k];
    return out;
}

Napi::Value Dispose(const Napi::CallbackInfo & info) {
    static_cast<Sampler *>(info.Data())->free_all();
    return info.Env().Undefined();
}

Napi::Value CreateSampler(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    llama_model * model = model_of(env, info[0]);
    llama_context * lctx = model ? context_of(env, info[1], model) : nullptr;
    if (!lctx || !info[2].IsObject()) {
        Napi::TypeError::New(env, "createSampler(model, context of that model, { temperature, topK, topP, seed })").ThrowAsJavaScriptException();
        return env.Null();
    }
    Napi::Object cfg = info[2].As<Napi::Object>();
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const float temperature = number_or(cfg, "temperature", 0.0f);
    const float top_p = number_or(cfg, "topP", 0.95f);
    const int32_t top_k = (int32_t) number_or(cfg, "topK", 40.0f);
    Napi::Value seed_v = cfg.Get("seed");
    const uint32_t seed = seed_v.IsNumber() ? seed_v.As<Napi::Number>().Uint32Value() : (uint32_t) time(nullptr);

    auto * s = new Sampler{lctx, vocab};
    s->chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (temperature <= 0.0f) {
        llama_sampler_chain_add(s->chain, llama_sampler_init_greedy());
    } else {
        llama_sampler_chain_add(s->chain, llama_sampler_init_top_k(top_k <= 0 ? n_vocab : std::min(top_k, n_vocab)));
        // node-llama-cpp leaves top-p out at 1 (a no-op either way); min-p (0) is never asked for
        if (top_p >= 0.0f && top_p < 1.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_top_p(top_p, 1));
        llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temperature));
        llama_sampler_chain_add(s->chain, llama_sampler_init_dist(seed));
    }

    Napi::Object handle = Napi::Object::New(env);
    handle.Set("native", Napi::External<Sampler>::New(env, s));
    handle.Set("setBias", Napi::Function::New(env, SetBias, "setBias", s));
    handle.Set("dispose", Napi::Function::New(env, Dispose, "dispose", s));
    // the handle owns the Sampler (the External and the functions only point at it)
    handle.AddFinalizer([](Napi::Env, Sampler * p) {
        p->free_all();
        delete p;
    }, s);
    return handle;
}

}  // namespace

void init_sampler(Napi::Env env, Napi::Object exports) {
    exports.Set("createSampler", Napi::Function::New(env, CreateSampler));
    exports.Set("sampleMany", Napi::Function::New(env, SampleMany));
}
