// Token sampling on the calling thread, for the plain generation loop (src/engines/llama/plain.ts):
//   createSampler(model, context, { temperature, topK, topP, minP, seed }) ->
//     { setBias(tokens: Uint32Array, logits: Float32Array), sample(batchLogitIndex) -> token | -1, dispose() }
// node-llama-cpp samples each sequence's next token in an async worker after every decode step,
// rebuilding and re-applying its sampler configuration in JavaScript first; with eight streams that
// took ~1.9 ms between steps of ~30 ms on a 2-core box (issue "chat throughput"), where llama-server
// samples in a few microseconds. This builds llama.cpp's sampler chain once per request, in the
// order node-llama-cpp's AddonSampler builds its own (logit bias, then greedy, or top-k, top-p,
// min-p, temperature and a seeded distribution), so a seeded request draws the same tokens either
// way. The logit bias is kept apart from the chain so it can change between steps.

#include <napi.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>

#include "llama.h"
#include "nlc.h"

namespace {

struct Sampler {
    llama_context * ctx = nullptr;
    const llama_vocab * vocab = nullptr;
    llama_sampler * bias = nullptr;   // logit bias, applied first; null when none
    llama_sampler * chain = nullptr;  // the rest
    std::vector<llama_logit_bias> biases;

    void free_all() {
        if (bias) llama_sampler_free(bias);
        if (chain) llama_sampler_free(chain);
        bias = nullptr;
        chain = nullptr;
    }
};

// Candidates for one sample at a time: sampling runs on the JavaScript thread only.
std::vector<llama_token_data> candidates;

float number_or(const Napi::Object & o, const char * key, float fallback) {
    Napi::Value v = o.Get(key);
    return v.IsNumber() ? v.As<Napi::Number>().FloatValue() : fallback;
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
    s->biases.clear();
    for (size_t i = 0; i < tokens.ElementLength(); i++) {
        if (tokens[i] >= (uint32_t) n_vocab) {
            Napi::RangeError::New(env, "setBias: token " + std::to_string(tokens[i]) + " is outside the vocabulary").ThrowAsJavaScriptException();
            return env.Undefined();
        }
        s->biases.push_back(llama_logit_bias{(llama_token) tokens[i], logits[i]});
    }
    if (s->bias) llama_sampler_free(s->bias);
    s->bias = s->biases.empty() ? nullptr : llama_sampler_init_logit_bias(n_vocab, (int32_t) s->biases.size(), s->biases.data());
    return env.Undefined();
}

Napi::Value Sample(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    auto * s = static_cast<Sampler *>(info.Data());
    if (!s->chain) {
        Napi::Error::New(env, "the sampler is disposed").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    if (!info[0].IsNumber()) {
        Napi::TypeError::New(env, "sample(batchLogitIndex)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    const float * logits = llama_get_logits_ith(s->ctx, info[0].As<Napi::Number>().Int32Value());
    if (!logits) return Napi::Number::New(env, -1);
    const int32_t n_vocab = llama_vocab_n_tokens(s->vocab);
    candidates.resize(n_vocab);
    for (llama_token id = 0; id < n_vocab; id++) candidates[id] = llama_token_data{id, logits[id], 0.0f};
    llama_token_data_array cur{candidates.data(), (size_t) n_vocab, -1, false};
    if (s->bias) llama_sampler_apply(s->bias, &cur);
    llama_sampler_apply(s->chain, &cur);
    if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) return Napi::Number::New(env, -1);
    return Napi::Number::New(env, cur.data[cur.selected].id);
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
        Napi::TypeError::New(env, "createSampler(model, context of that model, { temperature, topK, topP, minP, seed })").ThrowAsJavaScriptException();
        return env.Null();
    }
    Napi::Object cfg = info[2].As<Napi::Object>();
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const float temperature = number_or(cfg, "temperature", 0.0f);
    const float top_p = number_or(cfg, "topP", 0.95f);
    const float min_p = number_or(cfg, "minP", 0.0f);
    const int32_t top_k = (int32_t) number_or(cfg, "topK", 40.0f);
    Napi::Value seed_v = cfg.Get("seed");
    const uint32_t seed = seed_v.IsNumber() ? seed_v.As<Napi::Number>().Uint32Value() : (uint32_t) time(nullptr);

    auto * s = new Sampler{lctx, vocab};
    s->chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (temperature <= 0.0f) {
        llama_sampler_chain_add(s->chain, llama_sampler_init_greedy());
    } else {
        llama_sampler_chain_add(s->chain, llama_sampler_init_top_k(top_k <= 0 ? n_vocab : std::min(top_k, n_vocab)));
        // node-llama-cpp leaves top-p out at 1 (a no-op either way) and min-p at 0
        if (top_p >= 0.0f && top_p < 1.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_top_p(top_p, 1));
        if (min_p > 0.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_min_p(min_p, 1));
        llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temperature));
        llama_sampler_chain_add(s->chain, llama_sampler_init_dist(seed));
    }

    Napi::Object handle = Napi::Object::New(env);
    handle.Set("setBias", Napi::Function::New(env, SetBias, "setBias", s));
    handle.Set("sample", Napi::Function::New(env, Sample, "sample", s));
    handle.Set("dispose", Napi::Function::New(env, Dispose, "dispose", s));
    handle.AddFinalizer([](Napi::Env, Sampler * p) {
        p->free_all();
        delete p;
    }, s);
    return handle;
}

}  // namespace

void init_sampler(Napi::Env env, Napi::Object exports) {
    exports.Set("createSampler", Napi::Function::New(env, CreateSampler));
}
