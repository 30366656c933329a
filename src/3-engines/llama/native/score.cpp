// Scoring continuations of a prompt (issue 47, typed judgments): the log-probability the model gives
// each of several token sequences after a prompt whose tokens are in a sequence's cache, as the
// model's own next-token distributions chain them (a multi-token answer scored as a sequence, not
// by its first token). Continuations that share a prefix share its decodes: they are laid out as a
// tree, each node with children decoded once, in depth-first order, and the cache trimmed back to
// the branch point before the next branch; a run of nodes with one child each (an answer's tokens
// past its last branch point) is decoded in one batch. Runs on the context's decode loop (loop.cpp), which owns
// the context, between two of its steps.
//   scoreContinuations(loop, seq, nPast, last, continuations: Uint32Array[], biasTokens?, biasLogits?)
//     -> Promise<Float64Array>: log-probability per continuation (-Infinity where a bias bars it)
//   The sequence's cache holds its first nPast prompt tokens; `last` is the prompt's last token,
//   decoded here at nPast for the first distribution. After it, the cache holds nPast + 1 tokens.

#include <napi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llama.h"
#include "nlc.h"

namespace {

/** Tokens decoded in one batch along a chain of single-child nodes (a longer chain takes several). */
constexpr int32_t MAX_CHAIN = 64;

struct Node {
    llama_token token = -1;
    std::map<llama_token, int32_t> children;  // token -> node
};

class ScoreWorker : public Napi::AsyncWorker {
  public:
    ScoreWorker(Napi::Env env, DecodeLoopTasks * loop, llama_seq_id seq, llama_pos n_past, llama_token last, std::vector<std::vector<llama_token>> conts,
                std::map<llama_token, float> bias)
        : Napi::AsyncWorker(env), deferred(Napi::Promise::Deferred::New(env)), loop(loop), seq(seq), n_past(n_past), last(last),
          conts(std::move(conts)), bias(std::move(bias)) {}

    Napi::Promise promise() { return deferred.Promise(); }

    void Execute() override {
        // the tree of continuations: node 0 is the prompt's end
        nodes.assign(1, Node{});
        leaf.clear();
        size_t depth = 0;
        for (const auto & c : conts) {
            int32_t at = 0;
            for (llama_token t : c) {
                auto it = nodes[at].children.find(t);
                if (it == nodes[at].children.end()) {
                    nodes.push_back(Node{t, {}});
                    it = nodes[at].children.emplace(t, (int32_t) nodes.size() - 1).first;
                }
                at = it->second;
            }
            leaf.push_back(at);
            depth = std::max(depth, c.size());
        }
        lp.assign(nodes.size(), 0.0);
        parent.assign(nodes.size(), 0);
        const int rc = loop->run_task([&](llama_context * ctx) -> int {
            if ((int64_t) n_past + 1 + (int64_t) depth > (int64_t) llama_n_ctx_seq(ctx)) return -3;
            llama_memory_t mem = llama_get_memory(ctx);
            llama_memory_seq_rm(mem, seq, n_past, -1);
            max_chain = std::max<int32_t>(1, std::min<int32_t>(MAX_CHAIN, (int32_t) llama_n_batch(ctx)));
            llama_batch batch = llama_batch_init(MAX_CHAIN, 0, 1);
            const int rc = visit(ctx, batch, 0, last, n_past);
            llama_batch_free(batch);
            llama_memory_seq_rm(mem, seq, n_past + 1, -1);  // the prompt stays, whole
            return rc;
        });
        if (rc == -3) return SetError("the prompt and the longest answer do not fit the slot's context");
        if (rc != 0) return SetError("llama.cpp failed to decode while scoring (code " + std::to_string(rc) + ")");
    }

    void OnOK() override {
        Napi::Env env = Env();
        auto out = Napi::Float64Array::New(env, conts.size());
        for (size_t i = 0; i < conts.size(); i++) {
            // a continuation's log-probability: the sum along its path (an empty one is certain)
            double sum = 0;
            for (int32_t at = leaf[i]; at != 0; at = parent[at]) sum += lp[at];
            out[i] = sum;
        }
        deferred.Resolve(out);
    }
    void OnError(const Napi::Error & e) override { deferred.Reject(e.Value()); }

  private:
    Napi::Promise::Deferred deferred;
    DecodeLoopTasks * loop;
    llama_seq_id seq;
    llama_pos n_past;
    llama_token last;
    std::vector<std::vector<llama_token>> conts;
    std::map<llama_token, float> bias;
    std::vector<Node> nodes;
    std::vector<int32_t> leaf, parent;
    std::vector<double> lp;  // log p(node's token | its parent's state)
    int32_t max_chain = MAX_CHAIN;

    // Decodes `token` at `pos` (the state of node `at`) and, in the same batch, the chain of nodes
    // below it that have one child each and children of their own (an answer's tokens past the last
    // branch point: one decode for the run, not one a token), gives each decoded node's children
    // their log-probabilities, then does the same below each child of the chain's last node.
    int visit(llama_context * ctx, llama_batch & batch, int32_t at, llama_token token, llama_pos pos) {
        std::vector<int32_t> chain{at};
        while ((int32_t) chain.size() < max_chain && nodes[chain.back()].children.size() == 1) {
            const int32_t only = nodes[chain.back()].children.begin()->second;
            if (nodes[only].children.empty()) break;  // a leaf: scored from its parent's row, never decoded
            chain.push_back(only);
        }
        batch.n_tokens = (int32_t) chain.size();
        for (size_t i = 0; i < chain.size(); i++) {
            batch.token[i] = i == 0 ? token : nodes[chain[i]].token;
            batch.pos[i] = pos + (llama_pos) i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = seq;
            batch.logits[i] = true;
        }
        const int rc = llama_decode(ctx, batch);
        if (rc != 0) return rc;
        const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
        for (size_t i = 0; i < chain.size(); i++) {
            const float * row = llama_get_logits_ith(ctx, (int32_t) i);
            if (!row) return -4;
            auto logit = [&](llama_token t) {
                auto b = bias.find(t);
                return (double) row[t] + (b == bias.end() ? 0.0 : (double) b->second);
            };
            double top = -INFINITY;
            for (int32_t t = 0; t < n_vocab; t++) top = std::max(top, logit(t));
            double sum = 0;
            if (std::isfinite(top))
                for (int32_t t = 0; t < n_vocab; t++) sum += std::exp(logit(t) - top);
            const double lse = std::isfinite(top) ? top + std::log(sum) : INFINITY;  // every token barred: each child -inf
            for (auto [t, child] : nodes[chain[i]].children) {
                parent[child] = chain[i];
                lp[child] = logit(t) - lse;
            }
        }
        const int32_t last_node = chain.back();
        const llama_pos next = pos + (llama_pos) chain.size();
        llama_memory_t mem = llama_get_memory(ctx);
        for (auto [t, child] : nodes[last_node].children) {
            if (nodes[child].children.empty()) continue;
            const int r = visit(ctx, batch, child, t, next);
            if (r != 0) return r;
            llama_memory_seq_rm(mem, seq, next, -1);  // back to the chain's end for its next child
        }
        return 0;
    }
};

Napi::Value ScoreContinuations(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    auto fail = [&](const std::string & m) {
        Napi::TypeError::New(env, "scoreContinuations: " + m).ThrowAsJavaScriptException();
        return env.Null();
    };
    DecodeLoopTasks * loop = decode_loop_of(info[0]);
    if (!loop || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber() || !info[4].IsArray())
        return fail("(loop, seq, nPast, last, continuations: Uint32Array[], biasTokens?, biasLogits?)");
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(loop->model()));
    const int32_t seq = info[1].As<Napi::Number>().Int32Value();
    const int32_t n_past = info[2].As<Napi::Number>().Int32Value();
    const int64_t last = info[3].As<Napi::Number>().Int64Value();
    if (seq < 0 || n_past < 0 || last < 0 || last >= n_vocab) return fail("seq, nPast or the last token is out of range");
    std::vector<std::vector<llama_token>> conts;
    auto arr = info[4].As<Napi::Array>();
    if (arr.Length() == 0) return fail("at least one continuation");
    for (uint32_t i = 0; i < arr.Length(); i++) {
        Napi::Value v = arr.Get(i);
        if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) return fail("continuations are Uint32Arrays");
        auto a = v.As<Napi::Uint32Array>();
        std::vector<llama_token> c;
        for (size_t k = 0; k < a.ElementLength(); k++) {
            if (a[k] >= (uint32_t) n_vocab) return fail("token " + std::to_string(a[k]) + " is outside the vocabulary");
            c.push_back((llama_token) a[k]);
        }
        conts.push_back(std::move(c));
    }
    std::map<llama_token, float> bias;
    if (info[5].IsTypedArray() && info[6].IsTypedArray()) {
        auto t = info[5].As<Napi::Uint32Array>();
        auto l = info[6].As<Napi::Float32Array>();
        if (t.ElementLength() != l.ElementLength()) return fail("as many bias logits as bias tokens");
        for (size_t i = 0; i < t.ElementLength(); i++) {
            if (t[i] >= (uint32_t) n_vocab) return fail("bias token outside the vocabulary");
            bias[(llama_token) t[i]] += l[i];
        }
    }
    auto * w = new ScoreWorker(env, loop, seq, n_past, (llama_token) last, std::move(conts), std::move(bias));
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
}

}  // namespace

void init_score(Napi::Env env, Napi::Object exports) {
    exports.Set("scoreContinuations", Napi::Function::New(env, ScoreContinuations));
}
