// The decode loop of a chat context, on a native thread (issue 29):
//   new DecodeLoop(model, context, onEvents, { batchWidthBesideLive, quietMs, gapLimit, promptSlowdown, grammar… })
//   loop.submit(seq, tokens: Uint32Array, nPast, request) -> id   request: see Request below
//   loop.cancel(seq, id)   ends that request, if it still runs (a late cancel never ends the next one on seq)
//   loop.stats() -> { steps, tokens, flushes, decodeMs, sampleMs, loopMs }
//   loop.records(afterStep) -> the last steps as the loop ran them (StepRecord)
//   loop.close()
//   loop.hold(ms)   tests: pause before the next step
//   loop.copyWorth() -> the fewest prompt tokens a copy of another sequence's cache must save (request.copyFrom)
// One thread per llama_context owns it: it alone decodes, trims a sequence's cache and decodes image
// chunks into it (decode_loop_run, for mtmd-addon.cpp), so nothing in JavaScript sits between two
// decode steps. Each step batches every slot with tokens to decode (a generating slot's last token;
// prompts, bounded by the step's measured cost beside a live stream, else by a plan: prompt_shares),
// decodes, and samples each finishing slot with its own chain
// (logit bias, penalties, then greedy or top-k/top-p/temperature/seeded draw: the order
// node-llama-cpp's sampler uses, so a seeded request draws the same tokens) and grammar (llama.cpp's
// reject-then-resample scheme, as common_sampler_sample does).
// Tokens reach JavaScript through one thread-safe-function call at a time: events of steps that
// JavaScript has not taken yet go in the same call; the loop never waits for them.
// Events: Int32Array of [seq, token, kind, nPast, step] per event, kinds below; step: the loop's
// step count when it came (stats().steps; the decode that gave the token, for a token).

#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "llama-grammar.h"  // llama.cpp's own grammar, held directly: its parse states are counted (issue 41)
#include "llama.h"
#include "nlc.h"
#include "prompt-order.h"
#include "step-cost.h"
#include "utf8.h"

namespace {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// kind of an event; every kind but TOKEN ends the request. `token` of an ERROR is its code (below).
enum Kind : int32_t { TOKEN = 0, END_EOG = 1, END_MAX = 2, CANCELLED = 3, ERROR = 4, PREFILLED = 5 };
constexpr size_t EVENT_INTS = 5;
// prompt tokens in one prefill plan (prompt_shares): llama-server's default n_batch
constexpr int32_t PLAN_TOKENS = 2048;
enum Code : int32_t { E_BUSY = -1, E_GRAMMAR = -2, E_FULL = -3, E_NO_LOGITS = -4, E_CLOSED = -5, E_GRAMMAR_STATES = -6, E_GRAMMAR_SLOW = -7 };

// A grammar's cost per token, bounded so that one request's schema cannot slow or wedge every other
// request of the loop (issue 41: a nested repetition multiplied its parse states at every token and
// held the loop for 14 minutes; a 100,000-value enum made every step of its model take seconds).
// Every parse state is checked against each token llama.cpp considers, and merging the states after
// a token compares them pairwise: the work grows with the states' count, and past a few thousand one
// token takes seconds. A request whose grammar holds more states than statesMax, or whose
// sampling took more than msPerToken a token on average (beyond msAllowance, for a
// few costly first tokens), is ended with an error (schema_too_complex) and its slot freed. The
// bounds come from JavaScript (decode-loop.ts GRAMMAR_BUDGET), where the error's message names them.

struct Slot {
    int32_t seq = 0;
    uint32_t id = 0;                 // the request's, from submit (rising: the order requests came in): what a cancel names
    std::vector<llama_token> input;  // to decode: the rest of the prompt, then each sampled token
    llama_pos n_past = 0;            // tokens of this sequence in the cache
    int32_t max_tokens = 0;          // 0: decode the input only (PREFILLED)
    int32_t generated = 0;
    bool batch = false;              // batch work: gives way to live requests
    llama_sampler * chain = nullptr;
    llama_grammar * grammar = nullptr;
    double grammar_ms = 0;            // time its sampling took under the grammar (the budget above)
    uint8_t utf8 = utf8::S0;          // under a grammar: where its output stands in a UTF-8 character
    std::vector<llama_token> forced;  // forced[k] gets +1000 at the k-th token (tests' forced text)
    int32_t logit = -1;               // batch index of its logits in the step in flight
    bool started = false;             // its cache was trimmed to n_past
    uint64_t last_step = 0;
    llama_token picked = -1;
    int32_t failed = 0;
    int32_t planned = 0;              // its prompt tokens in the prefill plan under way (prompt_shares)
    int32_t copy_from = -1;           // a sequence whose cache it starts from (copyFrom): see intake
    uint64_t arrived = 0;             // the loop's prompt tokens decoded (prompt_done_) when it came: its wait (prompt_order)
    uint64_t prompt_done = 0;         // its own prompt tokens decoded
    ~Slot() {
        if (chain) llama_sampler_free(chain);
        if (grammar) llama_grammar_free_impl(grammar);
    }
};

struct Stats {
    uint64_t steps = 0, flushes = 0, tokens = 0;
    double decode_ms = 0, sample_ms = 0, loop_ms = 0;
};

// One decode step, as the loop ran it (records(): the scheduling tests read these, not wall time).
struct StepRecord {
    uint64_t step = 0;
    int32_t generating = 0;  // slots that took their one token (a generated token, or a prompt's last)
    int32_t live = 0;        // of them, live requests' generated tokens
    int32_t prompt = 0;      // prompt tokens in the step (beyond the last token of each)
    int32_t prompts = 0;     // slots those came from
    int32_t budget = -1;     // prompt tokens the step could carry beside generating slots; -1: whole plans
    double decode_ms = 0, step_ms = 0;
};
constexpr size_t RECORDS = 4096;

constexpr float FORCE_LOGIT = 1000.0f;
/** Candidates sampled per thread before another thread is worth starting (~0.25 ms of work, measured). */
constexpr size_t WORK_PER_THREAD = 256 * 1024;

class DecodeLoop : public Napi::ObjectWrap<DecodeLoop>, public DecodeLoopTasks {
  public:
    static Napi::FunctionReference ctor;
    static Napi::Function Define(Napi::Env env) {
        Napi::Function f = DefineClass(env, "DecodeLoop", {
            InstanceMethod("submit", &DecodeLoop::Submit),
            InstanceMethod("cancel", &DecodeLoop::Cancel),
            InstanceMethod("stats", &DecodeLoop::GetStats),
            InstanceMethod("records", &DecodeLoop::Records),
            InstanceMethod("close", &DecodeLoop::Close),
            InstanceMethod("hold", &DecodeLoop::Hold),
            InstanceMethod("copyWorth", &DecodeLoop::CopyWorth),
        });
        ctor = Napi::Persistent(f);
        ctor.SuppressDestruct();
        return f;
    }

    DecodeLoop(const Napi::CallbackInfo & info) : Napi::ObjectWrap<DecodeLoop>(info) {
        Napi::Env env = info.Env();
        model_ = model_of(env, info[0]);
        ctx_ = model_ ? context_of(env, info[1], model_) : nullptr;
        if (!ctx_ || !info[2].IsFunction()) {
            Napi::TypeError::New(env, "new DecodeLoop(model, context of that model, onEvents, options)").ThrowAsJavaScriptException();
            return;
        }
        vocab_ = llama_model_get_vocab(model_);
        n_vocab_ = llama_vocab_n_tokens(vocab_);
        Napi::Object o = info[3].IsObject() ? info[3].As<Napi::Object>() : Napi::Object::New(env);
        auto num = [&](const char * k, double d) { Napi::Value v = o.Get(k); return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : d; };
        n_batch_ = (int32_t) llama_n_batch(ctx_);
        n_ctx_seq_ = (int32_t) llama_n_ctx_seq(ctx_);
        width_beside_live_ = (int32_t) std::min(num("batchWidthBesideLive", 1e9), 1e9);
        quiet_ms_ = num("quietMs", 2000);
        grammar_states_max_ = (size_t) std::max(1.0, num("grammarStatesMax", 4096));
        grammar_ms_per_token_ = num("grammarMsPerToken", 25);
        grammar_ms_allowance_ = num("grammarMsAllowance", 1000);
        gap_limit_ = num("gapLimit", 3);
        slowdown_ = num("promptSlowdown", StepCost::SLOWDOWN);
        cost_ = std::make_unique<StepCost>((int32_t) llama_n_seq_max(ctx_));
        records_.resize(RECORDS);
        batch_ = llama_batch_init(n_batch_, 0, 1);
        tsfn_ = Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "decode-loop", 0, 1, this);
        tsfn_.Unref(env);
        thread_ = std::thread([this] { run(); });
    }

    ~DecodeLoop() override { stop(); }

    // DecodeLoopTasks: any thread but the loop's; blocks until the task ran between two steps.
    int run_task(const std::function<int(llama_context *)> & task) override {
        auto done = std::make_shared<std::promise<int>>();
        std::future<int> result = done->get_future();
        {
            std::lock_guard<std::mutex> l(mu_);
            if (stop_) return E_CLOSED;
            tasks_.push_back([task, done](llama_context * ctx) {
                if (!ctx) return done->set_value(E_CLOSED);  // the loop closed first
                try {
                    done->set_value(task(ctx));
                } catch (...) {
                    done->set_value(E_GRAMMAR);
                }
            });
        }
        cv_.notify_one();
        return result.get();
    }

    const llama_model * model() const override { return model_; }

  private:
    llama_model * model_ = nullptr;
    llama_context * ctx_ = nullptr;
    const llama_vocab * vocab_ = nullptr;
    int32_t n_vocab_ = 0;
    utf8::Table utf8_;  // for slots under a grammar: built with the first one
    int32_t n_batch_ = 512;
    int32_t n_ctx_seq_ = 0;
    int32_t width_beside_live_ = 1 << 30;
    double quiet_ms_ = 2000;
    size_t grammar_states_max_ = 4096;
    double grammar_ms_per_token_ = 25;
    double grammar_ms_allowance_ = 1000;
    double gap_limit_ = 3;  // gapLimit: a step beside live generating slots takes at most about this many times their step alone; 0: whole plans
    double slowdown_ = StepCost::SLOWDOWN;  // promptSlowdown: how much dearer a prompt token may get to keep to gapLimit
    llama_batch batch_{};

    std::thread thread_;
    std::mutex mu_;  // guards incoming_, cancels_, tasks_, stop_, hold_until_
    std::condition_variable cv_;
    std::vector<std::unique_ptr<Slot>> incoming_;
    std::vector<std::pair<int32_t, uint32_t>> cancels_;  // seq, request id
    std::vector<std::function<void(llama_context *)>> tasks_;
    bool stop_ = false;
    bool closed_ = false;
    double hold_until_ = 0;  // tests (Hold): no step before then

    // loop thread only
    std::map<int32_t, std::unique_ptr<Slot>> slots_;  // ordered by seq id: one llama.cpp micro-batch
    uint64_t step_ = 0;
    double last_live_ = -1e18;  // when the last live request ended
    uint64_t prompt_done_ = 0;  // prompt tokens decoded, all slots (prompt_order's wait)
    std::unique_ptr<StepCost> cost_;
    int32_t budget_ = -1;       // the step's prompt budget (prompt_shares), -1: whole plans
    std::vector<int32_t> step_events_;

    std::mutex out_mu_;  // guards outbox_, scheduled_
    std::vector<int32_t> outbox_;
    bool scheduled_ = false;
    Napi::ThreadSafeFunction tsfn_;
    int active_ = 0;  // JS thread: submitted, not ended (keeps the event loop alive)
    uint32_t next_id_ = 0;  // JS thread

    std::mutex stats_mu_;  // guards stats_, records_
    Stats stats_;
    std::vector<StepRecord> records_;  // the last RECORDS steps, by step % RECORDS

    void stop() {
        if (closed_) return;
        closed_ = true;
        {
            std::lock_guard<std::mutex> l(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
        for (auto & t : tasks_) t(nullptr);  // callers still waiting learn the loop closed
        tasks_.clear();
        slots_.clear();
        incoming_.clear();
        llama_batch_free(batch_);
        tsfn_.Release();
    }

    // ---- JS thread ----

    // submit(seq, tokens, nPast, { maxTokens, batch, temperature, topK, topP, seed, biasTokens,
    //   biasLogits, penaltyLastN, frequencyPenalty, presencePenalty, grammar, lazyPatterns, lazyTokens, forced,
    //   copyFrom })   copyFrom: a sequence whose cache holds this one's first nPast tokens (intake copies it)
    Napi::Value Submit(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        auto fail = [&](const std::string & m) {
            Napi::TypeError::New(env, "submit: " + m).ThrowAsJavaScriptException();
            return env.Undefined();
        };
        if (closed_) return fail("the loop is closed");
        if (!info[0].IsNumber() || !info[1].IsTypedArray() || !info[2].IsNumber() || !info[3].IsObject())
            return fail("submit(seq, tokens: Uint32Array, nPast, request)");
        auto s = std::make_unique<Slot>();
        s->seq = info[0].As<Napi::Number>().Int32Value();
        auto tokens = info[1].As<Napi::Uint32Array>();
        s->input.assign(tokens.Data(), tokens.Data() + tokens.ElementLength());
        s->n_past = info[2].As<Napi::Number>().Int32Value();
        if (s->seq < 0 || s->seq >= (int32_t) llama_n_seq_max(ctx_)) return fail("no such sequence");
        if (s->input.empty()) return fail("at least one token to decode");
        if (s->n_past < 0) return fail("nPast < 0");
        for (llama_token t : s->input)
            if (t < 0 || t >= n_vocab_) return fail("token " + std::to_string(t) + " is outside the vocabulary");
        Napi::Object cfg = info[3].As<Napi::Object>();
        auto num = [&](const char * k, double d) { Napi::Value v = cfg.Get(k); return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : d; };
        s->max_tokens = (int32_t) num("maxTokens", 0);
        const int32_t from = (int32_t) num("copyFrom", -1);
        if (from >= 0) {
            if (from >= (int32_t) llama_n_seq_max(ctx_) || from == s->seq) return fail("copyFrom: another sequence of this context");
            s->copy_from = from;
        }
        s->batch = cfg.Get("batch").ToBoolean().Value();
        const float temp = (float) num("temperature", 0);
        const int32_t top_k = (int32_t) num("topK", 40);
        const float top_p = (float) num("topP", 0.95);
        const uint32_t seed = (uint32_t) num("seed", 0);
        s->chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        Napi::Value bt = cfg.Get("biasTokens"), bl = cfg.Get("biasLogits");
        if (bt.IsTypedArray() && bl.IsTypedArray()) {
            auto t = bt.As<Napi::Uint32Array>();
            auto v = bl.As<Napi::Float32Array>();
            if (t.ElementLength() != v.ElementLength()) return fail("as many bias logits as bias tokens");
            std::vector<llama_logit_bias> b;
            for (size_t i = 0; i < t.ElementLength(); i++) {
                if (t[i] >= (uint32_t) n_vocab_) return fail("bias token " + std::to_string(t[i]) + " is outside the vocabulary");
                b.push_back({(llama_token) t[i], v[i]});
            }
            if (!b.empty()) llama_sampler_chain_add(s->chain, llama_sampler_init_logit_bias(n_vocab_, (int32_t) b.size(), b.data()));
        }
        const float freq = (float) num("frequencyPenalty", 0), presence = (float) num("presencePenalty", 0);
        if (freq != 0 || presence != 0)
            llama_sampler_chain_add(s->chain, llama_sampler_init_penalties(n_vocab_, (int32_t) num("penaltyLastN", 64), 1.0f, freq, presence));
        if (temp <= 0) {
            llama_sampler_chain_add(s->chain, llama_sampler_init_greedy());
        } else {
            llama_sampler_chain_add(s->chain, llama_sampler_init_top_k(top_k <= 0 ? n_vocab_ : std::min(top_k, n_vocab_)));
            // node-llama-cpp leaves top-p out at 1 (a no-op either way)
            if (top_p >= 0.0f && top_p < 1.0f) llama_sampler_chain_add(s->chain, llama_sampler_init_top_p(top_p, 1));
            llama_sampler_chain_add(s->chain, llama_sampler_init_temp(temp));
            llama_sampler_chain_add(s->chain, llama_sampler_init_dist(seed));
        }
        Napi::Value forced = cfg.Get("forced");
        if (forced.IsTypedArray()) {
            auto f = forced.As<Napi::Uint32Array>();
            for (size_t i = 0; i < f.ElementLength(); i++) {
                if (f[i] >= (uint32_t) n_vocab_) return fail("forced token outside the vocabulary");
                s->forced.push_back((llama_token) f[i]);
            }
        }
        Napi::Value g = cfg.Get("grammar");
        if (g.IsString()) {
            std::string gbnf = g.As<Napi::String>().Utf8Value();
            std::vector<std::string> pats;
            Napi::Value lp = cfg.Get("lazyPatterns");
            if (lp.IsArray()) {
                auto a = lp.As<Napi::Array>();
                for (uint32_t i = 0; i < a.Length(); i++) pats.push_back(a.Get(i).ToString().Utf8Value());
            }
            std::vector<const char *> cp;
            for (auto & p : pats) cp.push_back(p.c_str());
            std::vector<llama_token> toks;
            Napi::Value lt = cfg.Get("lazyTokens");
            if (lt.IsTypedArray()) {
                auto a = lt.As<Napi::Uint32Array>();
                for (size_t i = 0; i < a.ElementLength(); i++) {
                    if (a[i] >= (uint32_t) n_vocab_) return fail("lazy token outside the vocabulary");
                    toks.push_back((llama_token) a[i]);
                }
            }
            const bool lazy = lp.IsArray() || lt.IsTypedArray();
            try {
                s->grammar = llama_grammar_init_impl(vocab_, gbnf.c_str(), "root", lazy, cp.data(), cp.size(), toks.data(), toks.size());
            } catch (const std::exception & e) {
                return fail(std::string("the grammar does not compile: ") + e.what());
            }
            if (!s->grammar) return fail("the grammar does not parse");
            if (s->grammar->stacks.size() > grammar_states_max_) return fail("the grammar starts with more than " + std::to_string(grammar_states_max_) + " parse states");
            // built once, here on the JS thread, before the first slot that reads it reaches the loop
            if (!utf8_.built()) utf8_.build(vocab_);
        }
        if (active_++ == 0) tsfn_.Ref(env);
        const uint32_t id = s->id = ++next_id_;
        {
            std::lock_guard<std::mutex> l(mu_);
            incoming_.push_back(std::move(s));
        }
        cv_.notify_one();
        return Napi::Number::New(env, id);
    }

    // A caller that has not yet seen its request's end may cancel it after it ended: the id keeps
    // that cancel off the next request on the sequence, which it would otherwise end at once.
    Napi::Value Cancel(const Napi::CallbackInfo & info) {
        if (!info[0].IsNumber() || !info[1].IsNumber() || closed_) return info.Env().Undefined();
        {
            std::lock_guard<std::mutex> l(mu_);
            cancels_.emplace_back(info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Uint32Value());
        }
        cv_.notify_one();
        return info.Env().Undefined();
    }

    Napi::Value GetStats(const Napi::CallbackInfo & info) {
        Stats s;
        {
            std::lock_guard<std::mutex> l(stats_mu_);
            s = stats_;
        }
        Napi::Object o = Napi::Object::New(info.Env());
        o.Set("steps", (double) s.steps);
        o.Set("flushes", (double) s.flushes);
        o.Set("tokens", (double) s.tokens);
        o.Set("decodeMs", s.decode_ms);
        o.Set("sampleMs", s.sample_ms);
        o.Set("loopMs", s.loop_ms);
        return o;
    }

    // records(afterStep = 0) -> Float64Array of [step, generating, live, prompt, prompts, budget,
    // decodeMs, stepMs] per step after that one, of the last RECORDS steps, in order
    Napi::Value Records(const Napi::CallbackInfo & info) {
        const double after = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
        std::vector<double> out;
        {
            std::lock_guard<std::mutex> l(stats_mu_);
            const uint64_t last = stats_.steps;
            const uint64_t first = std::max<double>(after + 1, last >= RECORDS ? (double) (last - RECORDS + 1) : 1.0);
            for (uint64_t k = first; k <= last; k++) {
                const StepRecord & r = records_[k % RECORDS];
                if (r.step != k) continue;
                out.insert(out.end(), {(double) r.step, (double) r.generating, (double) r.live, (double) r.prompt, (double) r.prompts, (double) r.budget, r.decode_ms, r.step_ms});
            }
        }
        auto arr = Napi::Float64Array::New(info.Env(), out.size());
        if (!out.empty()) std::memcpy(arr.Data(), out.data(), out.size() * sizeof(double));
        return arr;
    }

    // The fewest prompt tokens a copy of another sequence's cache (copyFrom) must save to pay: the
    // copy moves a whole sequence's cache (n_ctx_seq cells, keys and values of every layer, f16; each
    // byte read and written: 2 x bytes), a prefill computes ~2 FLOPs per weight per token; a byte
    // moved is counted as 200 FLOPs (a
    // GPU's bandwidth against its compute; a CPU's is nearer 10). At least 64. The head size is taken
    // as n_embd / n_head (llama.h has no key length): a model whose heads are wider (Qwen3-0.6B: 128
    // against 64) moves more than counted here.
    Napi::Value CopyWorth(const Napi::CallbackInfo & info) {
        const double n_head = std::max(1, llama_model_n_head(model_));
        const double head_dim = llama_model_n_embd(model_) / n_head;
        const double cell = 2.0 * llama_model_n_layer(model_) * llama_model_n_head_kv(model_) * head_dim * 2.0;
        const double bytes = cell * n_ctx_seq_;
        const double flops_per_token = 2.0 * (double) llama_model_n_params(model_);
        return Napi::Number::New(info.Env(), std::max(64.0, std::ceil(200.0 * 2.0 * bytes / flops_per_token)));
    }

    // Tests: the loop pauses `ms` before its next step, so requests submitted meanwhile reach one
    // step together (from JavaScript, submissions are milliseconds apart, steps of a tiny model less).
    // A deadline, not a task: a task ran after the intake had taken a request that came just before
    // it, which then stepped alone.
    Napi::Value Hold(const Napi::CallbackInfo & info) {
        const double ms = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
        if (closed_ || !(ms > 0)) return info.Env().Undefined();
        {
            std::lock_guard<std::mutex> l(mu_);
            hold_until_ = now_ms() + std::min(ms, 10000.0);
        }
        cv_.notify_one();
        return info.Env().Undefined();
    }

    Napi::Value Close(const Napi::CallbackInfo & info) {
        stop();
        return info.Env().Undefined();
    }

    // JS thread: every event the loop put out since the last call.
    static void Deliver(Napi::Env env, Napi::Function fn, DecodeLoop * self) {
        std::vector<int32_t> events;
        {
            std::lock_guard<std::mutex> l(self->out_mu_);
            events.swap(self->outbox_);
            self->scheduled_ = false;
        }
        if (events.empty() || env == nullptr) return;
        auto arr = Napi::Int32Array::New(env, events.size());
        std::memcpy(arr.Data(), events.data(), events.size() * sizeof(int32_t));
        for (size_t i = 2; i < events.size(); i += EVENT_INTS)
            if (events[i] != TOKEN && --self->active_ == 0) self->tsfn_.Unref(env);
        fn.Call({arr});
    }

    // ---- loop thread ----

    void emit(int32_t seq, int32_t token, int32_t kind, int32_t n_past) {
        step_events_.insert(step_events_.end(), {seq, token, kind, n_past, (int32_t) (step_ & 0x7FFFFFFF)});
    }

    void flush() {
        if (step_events_.empty()) return;
        bool call = false;
        {
            std::lock_guard<std::mutex> l(out_mu_);
            outbox_.insert(outbox_.end(), step_events_.begin(), step_events_.end());
            if (!scheduled_) call = scheduled_ = true;
        }
        step_events_.clear();
        if (call) {
            tsfn_.NonBlockingCall(this, [](Napi::Env env, Napi::Function fn, DecodeLoop * self) { Deliver(env, fn, self); });
            std::lock_guard<std::mutex> l(stats_mu_);
            stats_.flushes++;
        }
    }

    void end(std::map<int32_t, std::unique_ptr<Slot>>::iterator & it, int32_t token, int32_t kind) {
        Slot & s = *it->second;
        if (!s.batch) last_live_ = now_ms();
        emit(s.seq, token, kind, s.n_past);
        it = slots_.erase(it);
    }

    // Takes new requests, cancellations and tasks; waits while there is nothing to do.
    bool intake() {
        std::vector<std::function<void(llama_context *)>> tasks;
        {
            std::unique_lock<std::mutex> l(mu_);
            cv_.wait(l, [&] { return stop_ || !incoming_.empty() || !cancels_.empty() || !tasks_.empty() || !slots_.empty(); });
            if (stop_) return false;
            for (auto & s : incoming_) {
                // the caller waits for a sequence's request to end before the next
                if (slots_.count(s->seq)) {
                    emit(s->seq, E_BUSY, ERROR, -1);
                    continue;
                }
                // A prompt that another sequence's cache holds the start of starts from a copy of
                // it: the whole cache of that sequence (llama.cpp copies a stream whole; its buffer
                // at the next decode, before that step writes anything), trimmed to n_past when the
                // slot starts. Here, before any slot of this intake starts: the source's own new
                // request, if it came in the same intake, trims it only then. The caller knows the
                // source holds those n_past tokens (decode-loop.ts: its record, submitted in order).
                if (s->copy_from >= 0) llama_memory_seq_cp(llama_get_memory(ctx_), s->copy_from, s->seq, -1, -1);
                s->arrived = prompt_done_;
                slots_[s->seq] = std::move(s);
            }
            incoming_.clear();
            for (auto [seq, id] : cancels_) {
                auto it = slots_.find(seq);
                if (it != slots_.end() && it->second->id == id) end(it, -1, CANCELLED);
            }
            cancels_.clear();
            tasks.swap(tasks_);
        }
        // image chunks and the like: between two steps, with the context to themselves
        for (auto & t : tasks) t(ctx_);
        return true;
    }

    // Refuses the candidates the grammar let through that would break the slot's UTF-8 (utf8.h),
    // unless that leaves none.
    void keep_well_formed(const Slot & s, llama_token_data_array & cur) const {
        bool any = false;
        for (size_t k = 0; k < cur.size && !any; k++)
            any = cur.data[k].logit != -INFINITY && utf8_.next(s.utf8, cur.data[k].id) != utf8::BAD;
        if (!any) return;
        for (size_t k = 0; k < cur.size; k++)
            if (utf8_.next(s.utf8, cur.data[k].id) == utf8::BAD) cur.data[k].logit = -INFINITY;
    }

    // One token: the chain on all candidates; if a grammar refuses the pick, the grammar first and
    // the chain again (common_sampler_sample's way: the grammar is costly, most picks pass it).
    llama_token sample(Slot & s, const float * logits) {
        thread_local std::vector<llama_token_data> cand;
        const llama_token force = s.generated < (int32_t) s.forced.size() ? s.forced[s.generated] : -1;
        auto fill = [&] {
            cand.resize(n_vocab_);
            for (int32_t k = 0; k < n_vocab_; k++) cand[k] = llama_token_data{k, logits[k], 0.0f};
            if (force >= 0) cand[force].logit += FORCE_LOGIT;
        };
        fill();
        llama_token_data_array cur{cand.data(), (size_t) n_vocab_, -1, false};
        llama_sampler_apply(s.chain, &cur);
        if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) return -1;
        llama_token id = cur.data[cur.selected].id;
        if (s.grammar) {
            llama_token_data single{id, 1.0f, 0.0f};
            llama_token_data_array one{&single, 1, -1, false};
            if (utf8_.next(s.utf8, id) != utf8::BAD) llama_grammar_apply_impl(*s.grammar, &one);
            if (utf8_.next(s.utf8, id) == utf8::BAD || single.logit == -INFINITY) {
                fill();
                cur = {cand.data(), (size_t) n_vocab_, -1, false};
                llama_grammar_apply_impl(*s.grammar, &cur);
                keep_well_formed(s, cur);
                llama_sampler_apply(s.chain, &cur);
                if (cur.selected < 0 || cur.selected >= (int64_t) cur.size) return -1;
                id = cur.data[cur.selected].id;
            }
            llama_grammar_accept_impl(*s.grammar, id);
            const uint8_t next = utf8_.next(s.utf8, id);
            s.utf8 = next == utf8::BAD ? utf8::S0 : next;
        }
        llama_sampler_accept(s.chain, id);
        return id;
    }

    // Samples every finishing slot of the step; spread over threads when the work is large (a real
    // vocabulary of ~150k tokens costs ~0.5 ms a token: 16 ms a step for 32 streams one by one).
    void sample_all(std::vector<Slot *> & due) {
        std::vector<const float *> rows(due.size());
        // read on this thread: llama_get_logits_ith synchronizes the context and reorders outputs
        for (size_t k = 0; k < due.size(); k++) rows[k] = llama_get_logits_ith(ctx_, due[k]->logit);
        auto one = [&](size_t k) {
            Slot & s = *due[k];
            if (!rows[k]) {
                s.failed = E_NO_LOGITS;
                return;
            }
            // llama.cpp's grammar throws (a token past the grammar's end); escaping this thread it
            // would abort the process, so it ends the one request
            const double t0 = s.grammar ? now_ms() : 0;
            try {
                s.picked = sample(s, rows[k]);
                if (s.picked < 0) s.failed = E_NO_LOGITS;
            } catch (const std::exception &) {
                s.failed = E_GRAMMAR;
            }
            if (!s.grammar || s.failed) return;
            s.grammar_ms += now_ms() - t0;
            if (s.grammar->stacks.size() > grammar_states_max_) s.failed = E_GRAMMAR_STATES;
            else if (s.grammar_ms > grammar_ms_per_token_ * (s.generated + 1) + grammar_ms_allowance_) s.failed = E_GRAMMAR_SLOW;
        };
        static const size_t cores = std::max(1u, std::thread::hardware_concurrency());
        const size_t threads = std::min({due.size(), cores, std::max<size_t>(1, due.size() * (size_t) n_vocab_ / WORK_PER_THREAD)});
        if (threads <= 1) {
            for (size_t k = 0; k < due.size(); k++) one(k);
            return;
        }
        std::vector<std::thread> pool;
        for (size_t t = 1; t < threads; t++)
            pool.emplace_back([&, t] {
                for (size_t k = t; k < due.size(); k += threads) one(k);
            });
        for (size_t k = 0; k < due.size(); k += threads) one(k);
        for (auto & th : pool) th.join();
    }

    // Which slots decode this step: live prompts go alone (batch work waits for them), and beside
    // live traffic at most width_beside_live_ batch slots, the least recently stepped first.
    std::vector<Slot *> pick() {
        bool live_prompt = false, live = false;
        for (auto & [seq, s] : slots_) {
            if (s->batch) continue;
            live = true;
            if (s->generated == 0) live_prompt = true;
        }
        const bool around = live || now_ms() - last_live_ < quiet_ms_;
        std::vector<Slot *> batch;
        for (auto & [seq, s] : slots_)
            if (s->batch) batch.push_back(s.get());
        std::vector<Slot *> out;
        for (auto & [seq, s] : slots_)
            if (!s->batch) out.push_back(s.get());
        if (!live_prompt) {
            std::stable_sort(batch.begin(), batch.end(), [](Slot * a, Slot * b) { return a->last_step < b->last_step; });
            const size_t width = around ? (size_t) std::max(0, width_beside_live_) : batch.size();
            for (size_t k = 0; k < batch.size() && k < width; k++) out.push_back(batch[k]);
        }
        std::sort(out.begin(), out.end(), [](Slot * a, Slot * b) { return a->seq < b->seq; });
        return out;
    }

    // The order prompts get a step's tokens: prompt-order.h.
    std::vector<Slot *> ordered(const std::vector<Slot *> & prompts) const {
        std::vector<WaitingPrompt> w;
        for (Slot * s : prompts) w.push_back({s->id, (int64_t) s->input.size(), s->arrived, s->prompt_done});
        std::vector<Slot *> out;
        for (size_t i : prompt_order(w, prompt_done_)) out.push_back(prompts[i]);
        return out;
    }

    // How many prompt tokens each prompt of the step decodes. Generating slots take one token each.
    //   - Beside a live request that is generating, the step's prompt tokens are bounded by what the
    //     loop measured its steps to cost (step-cost.h): as many as keep the step within about
    //     gapLimit times a step of the generating slots alone, unless so few would read the prompt
    //     at a higher cost per token than larger steps do. A long prompt neither stalls the streams
    //     for its whole length (llama-server decodes a batch of up to 2,048 prompt tokens before
    //     anyone's next token) nor takes much longer than alone. The prompts share the budget in
    //     prompt-order.h's order, each as much as it has left.
    //   - Otherwise prompts share the rest by a plan of up to PLAN_TOKENS (llama-server's batch:
    //     2048, over its 512-token micro-batches) or n_batch if larger, made in that order: the
    //     prompts that finish in a plan all finish in its last step, together, as they do in
    //     llama-server's one batch, and the steps before it carry each a share of every one. Prompts
    //     that come while a plan is under way wait for the next one, but take what is left of its
    //     last step. (Shared out evenly without a bound, a long prompt held back every short one
    //     beside it.)
    std::map<Slot *, int32_t> prompt_shares(const std::vector<Slot *> & step) {
        std::vector<Slot *> prompts;
        int32_t left = n_batch_, generating = 0;
        bool live = false;
        for (Slot * s : step) {
            if (s->input.size() > 1) {
                prompts.push_back(s);
                continue;
            }
            left--;
            generating++;
            if (!s->batch && s->generated > 0) live = true;
        }
        prompts = ordered(prompts);
        std::map<Slot *, int32_t> share;
        budget_ = -1;
        if (live && gap_limit_ > 0 && !prompts.empty()) {
            int64_t waiting = 0;
            for (Slot * p : prompts) waiting += (int64_t) p->input.size();
            budget_ = cost_->budget(generating, gap_limit_, std::max(0, left), waiting, slowdown_);
            int32_t budget = budget_;
            for (Slot * p : prompts) {
                p->planned = 0;  // a plan under way ends: the next one is made when no one generates
                const int32_t take = std::min<int32_t>((int32_t) p->input.size(), budget);
                if (take <= 0) continue;
                share[p] = take;
                budget -= take;
            }
            return share;
        }
        std::vector<Slot *> plan;
        for (Slot * p : prompts)
            if (p->planned > 0) plan.push_back(p);
        if (plan.empty()) {
            int32_t budget = std::max(PLAN_TOKENS, n_batch_);
            for (Slot * p : prompts) {
                if (budget <= 0) break;
                p->planned = std::min<int32_t>((int32_t) p->input.size(), budget);
                budget -= p->planned;
                plan.push_back(p);
            }
        }
        int64_t total = 0;
        for (Slot * p : plan) total += p->planned;
        if (total <= left) {
            for (Slot * p : plan) share[p] = p->planned;
            left -= (int32_t) total;
        } else {
            // in proportion, so that all of the plan's prompts come to its last step together;
            // what rounding leaves over goes in order to those still short of the last token
            const int32_t room = std::max(0, left);
            for (Slot * p : plan) {
                share[p] = (int32_t) ((int64_t) p->planned * room / total);
                left -= share[p];
            }
            for (Slot * p : plan)
                if (left > 0 && share[p] + 1 < p->planned) {
                    share[p]++;
                    left--;
                }
        }
        // (a plan's prompt counts down its share as the step takes it: see run())
        // the plan's last step: what is left of it goes to the next prompts, in order
        for (Slot * p : prompts) {
            if (left <= 0) break;
            if (share.count(p)) continue;
            share[p] = std::min<int32_t>((int32_t) p->input.size(), left);
            left -= share[p];
        }
        return share;
    }

    void run() {
        llama_memory_t mem = llama_get_memory(ctx_);
        for (;;) {
            if (!intake()) return;
            {
                std::unique_lock<std::mutex> l(mu_);
                if (hold_until_ > now_ms()) {
                    // held (tests): what is submitted meanwhile is taken by the next intake, with the rest
                    cv_.wait_for(l, std::chrono::duration<double, std::milli>(hold_until_ - now_ms()), [&] { return stop_; });
                    continue;
                }
            }
            const double t0 = now_ms();
            for (auto & [seq, s] : slots_) {
                s->logit = -1;
                if (!s->started) {
                    llama_memory_seq_rm(mem, seq, s->n_past, -1);  // the part of its cache the new prompt does not share
                    s->started = true;
                }
            }
            std::vector<Slot *> step = pick();
            std::map<Slot *, int32_t> share = prompt_shares(step);
            batch_.n_tokens = 0;
            std::vector<Slot *> in_step;
            StepRecord rec;
            rec.budget = budget_;
            for (Slot * s : step) {
                auto it = share.find(s);
                // a generating slot takes its token; a prompt outside the plan and its last step waits
                // for the next plan (it took a token a step, beyond the room prompt_shares counted:
                // the step overflowed n_batch and the slot of the highest sequence id, even one in the
                // plan, was left out, losing its share)
                const int32_t take = it != share.end() ? it->second : s->input.size() > 1 ? 0 : 1;
                if (take <= 0 || batch_.n_tokens + take > n_batch_) continue;
                s->planned = std::max(0, s->planned - take);
                if (s->n_past + take > n_ctx_seq_) {
                    // not reached: a request's prompt and max_tokens fit its slot (chat-engine.ts)
                    s->failed = E_FULL;
                    continue;
                }
                const bool finishing = take == (int32_t) s->input.size();
                if (it != share.end()) {
                    rec.prompt += take;
                    rec.prompts++;
                } else {
                    rec.generating++;
                    if (!s->batch && s->generated > 0) rec.live++;
                }
                if (s->generated == 0) {
                    s->prompt_done += take;
                    prompt_done_ += take;
                }
                for (int32_t k = 0; k < take; k++) {
                    const int32_t i = batch_.n_tokens++;
                    batch_.token[i] = s->input[k];
                    batch_.pos[i] = s->n_past + k;
                    batch_.n_seq_id[i] = 1;
                    batch_.seq_id[i][0] = s->seq;
                    batch_.logits[i] = finishing && k == take - 1 && s->max_tokens > 0;
                }
                if (finishing && s->max_tokens > 0) s->logit = batch_.n_tokens - 1;
                s->input.erase(s->input.begin(), s->input.begin() + take);
                s->n_past += take;
                s->last_step = step_ + 1;
                in_step.push_back(s);
            }
            int rc = 0;
            double t1 = now_ms(), t2 = t1;
            if (batch_.n_tokens > 0) {
                step_++;
                rc = llama_decode(ctx_, batch_);
                t2 = now_ms();
            }
            std::vector<Slot *> due;
            if (rc == 0)
                for (Slot * s : in_step)
                    if (s->logit >= 0) due.push_back(s);
            if (!due.empty()) sample_all(due);
            const double t3 = now_ms();
            uint64_t sampled = 0;
            for (auto it = slots_.begin(); it != slots_.end();) {
                Slot & s = *it->second;
                const bool stepped = std::find(in_step.begin(), in_step.end(), &s) != in_step.end();
                if (s.failed) {
                    end(it, s.failed, ERROR);
                    continue;
                }
                if (stepped && rc != 0) {
                    // the step's tokens are not in the cache for certain: the caller drops the sequence's cache
                    s.n_past = -1;
                    end(it, rc, ERROR);
                    continue;
                }
                if (!stepped) {
                    ++it;
                    continue;
                }
                if (s.max_tokens == 0 && s.input.empty()) {
                    end(it, -1, PREFILLED);
                    continue;
                }
                if (s.logit < 0) {
                    ++it;
                    continue;
                }
                const llama_token id = s.picked;
                s.generated++;
                sampled++;
                if (llama_vocab_is_eog(vocab_, id)) {
                    end(it, id, END_EOG);
                    continue;
                }
                if (s.generated >= s.max_tokens) {
                    end(it, id, END_MAX);
                    continue;
                }
                emit(s.seq, id, TOKEN, s.n_past);
                s.input.assign(1, id);
                ++it;
            }
            if (batch_.n_tokens > 0) {
                rec.step = step_;
                rec.decode_ms = t2 - t1;
                rec.step_ms = now_ms() - t0;
                cost_->record(rec.generating, rec.prompt, rec.decode_ms, rec.step_ms);
            }
            {
                // counted before the step's tokens go out: a caller that has them sees the step counted
                std::lock_guard<std::mutex> l(stats_mu_);
                if (batch_.n_tokens > 0) {
                    stats_.steps++;
                    records_[step_ % RECORDS] = rec;
                }
                stats_.tokens += sampled;
                stats_.decode_ms += t2 - t1;
                stats_.sample_ms += t3 - t2;
                stats_.loop_ms += (t1 - t0) + (now_ms() - t3);
            }
            flush();
        }
    }
};
Napi::FunctionReference DecodeLoop::ctor;

}  // namespace

DecodeLoopTasks * decode_loop_of(Napi::Value v) {
    if (!v.IsObject() || DecodeLoop::ctor.IsEmpty() || !v.As<Napi::Object>().InstanceOf(DecodeLoop::ctor.Value())) return nullptr;
    return DecodeLoop::Unwrap(v.As<Napi::Object>());
}

void init_loop(Napi::Env env, Napi::Object exports) {
    exports.Set("DecodeLoop", DecodeLoop::Define(env));
}
