// Counting a long text's tokens off the JavaScript thread, up to a bound (issue 41: a 62 MB prompt
// tokenized on the event loop froze every route for 20-26 s, then was refused for its length):
//   countTokensUpTo(model, text, limit) -> Promise<number>
// The text is tokenized in pieces of about CHUNK bytes, each cut after a space or newline (where a
// byte-level BPE's pre-tokenizer splits too), on a libuv worker thread; counting stops once it
// passes `limit`, so the work is bounded by the limit, not by the text. The count of the pieces is
// the text's count give or take a token a cut; callers leave that margin.

#include <napi.h>

#include <string>

#include "llama.h"
#include "nlc.h"

namespace {

constexpr size_t CHUNK = 64 * 1024;

class CountWorker : public Napi::AsyncWorker {
  public:
    CountWorker(Napi::Env env, const llama_model * model, std::string text, double limit)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), vocab_(llama_model_get_vocab(model)), text_(std::move(text)), limit_(limit) {}

    Napi::Promise promise() { return deferred_.Promise(); }

    void Execute() override {
        size_t from = 0;
        while (from < text_.size() && (double) count_ <= limit_) {
            size_t to = std::min(text_.size(), from + CHUNK);
            if (to < text_.size()) {
                // cut after the last space or newline of the piece, if it has one
                const size_t cut = text_.find_last_of(" \n", to - 1);
                if (cut != std::string::npos && cut > from) to = cut + 1;
                // never inside a UTF-8 character
                while (to < text_.size() && to > from && ((unsigned char) text_[to] & 0xC0) == 0x80) to--;
            }
            const int32_t n = llama_tokenize(vocab_, text_.data() + from, (int32_t) (to - from), nullptr, 0, false, false);
            count_ += n < 0 ? (int64_t) -n : (int64_t) n;
            from = to;
        }
    }

    void OnOK() override { deferred_.Resolve(Napi::Number::New(Env(), (double) count_)); }
    void OnError(const Napi::Error & e) override { deferred_.Reject(e.Value()); }

  private:
    Napi::Promise::Deferred deferred_;
    const llama_vocab * vocab_;
    std::string text_;
    double limit_;
    int64_t count_ = 0;
};

Napi::Value CountTokensUpTo(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    auto * h = head_of<NlcModelHead>(env, info[0]);
    if (!h || !h->model || !info[1].IsString() || !info[2].IsNumber()) {
        Napi::TypeError::New(env, "countTokensUpTo(model, text, limit)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    auto * worker = new CountWorker(env, h->model, info[1].As<Napi::String>().Utf8Value(), info[2].As<Napi::Number>().DoubleValue());
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
}

}  // namespace

void init_tokens(Napi::Env env, Napi::Object exports) {
    exports.Set("countTokensUpTo", Napi::Function::New(env, CountTokensUpTo, "countTokensUpTo"));
}
