// A token's text as bytes, for streaming a generation's output without detokenizing in context
// every step (issue 29: node-llama-cpp's detokenize with the last tokens for context was a fifth of
// the JavaScript a streamed token costs):
//   tokenPiece(model, token, special) -> { bytes: Uint8Array, spacePrefix: boolean }
// `bytes` is what llama_detokenize gives for the token alone (with `special`, a control token's
// written form; without, nothing), except that the leading space llama_detokenize drops at the start
// of a text (a SentencePiece vocabulary's space prefix) is kept and flagged `spacePrefix`: a piece
// inside a text keeps it. A piece may be part of a UTF-8 character (byte-level vocabularies); the
// caller joins the bytes (token-text.ts).

#include <napi.h>

#include <cstring>
#include <string>

#include "llama.h"
#include "nlc.h"

namespace {

std::string bytes_of(int32_t (*fill)(const llama_vocab *, llama_token, char *, int32_t, bool), const llama_vocab * vocab, llama_token token, bool special) {
    std::string out(16, '\0');
    int32_t n = fill(vocab, token, out.data(), (int32_t) out.size(), special);
    if (n < 0) {
        out.resize((size_t) -n);
        n = fill(vocab, token, out.data(), (int32_t) out.size(), special);
    }
    out.resize(n > 0 ? (size_t) n : 0);
    return out;
}

int32_t raw_piece(const llama_vocab * vocab, llama_token token, char * buf, int32_t len, bool special) {
    return llama_token_to_piece(vocab, token, buf, len, 0, special);
}

int32_t alone(const llama_vocab * vocab, llama_token token, char * buf, int32_t len, bool special) {
    return llama_detokenize(vocab, &token, 1, buf, len, false, special);
}

// node-llama-cpp's model, loaded with its weights or vocabulary only (whose n_embd model_of checks may be 0)
const llama_model * vocab_model_of(const Napi::Env & env, Napi::Value v) {
    auto * h = head_of<NlcModelHead>(env, v);
    if (!h || !h->model) return nullptr;
    const llama_vocab * vocab = llama_model_get_vocab(h->model);
    return vocab && llama_vocab_n_tokens(vocab) > 0 ? h->model : nullptr;
}

Napi::Value TokenPiece(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    const llama_model * model = vocab_model_of(env, info[0]);
    if (!model || !info[1].IsNumber()) {
        Napi::TypeError::New(env, "tokenPiece(model, token, special)").ThrowAsJavaScriptException();
        return env.Null();
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t token = info[1].As<Napi::Number>().Int32Value();
    if (token < 0 || token >= llama_vocab_n_tokens(vocab)) {
        Napi::RangeError::New(env, "tokenPiece: token " + std::to_string(token) + " is outside the vocabulary").ThrowAsJavaScriptException();
        return env.Null();
    }
    const bool special = info[2].ToBoolean().Value();
    const std::string raw = bytes_of(raw_piece, vocab, token, special);
    const std::string clean = bytes_of(alone, vocab, token, special);
    // The piece alone differs from the raw one by the start-of-text space of a vocabulary with a
    // space prefix (SentencePiece, Unigram: llama-vocab.cpp's add_space_prefix; they never clean up
    // spaces), or by llama.cpp's clean-up of spaces before punctuation (clean_up_tokenization_spaces:
    // byte-level BPE, WordPiece), which applies in a text too.
    const enum llama_vocab_type type = llama_vocab_type(vocab);
    const bool prefixed = type == LLAMA_VOCAB_TYPE_SPM || type == LLAMA_VOCAB_TYPE_UGM;
    const bool space_prefix = prefixed && clean != raw && !raw.empty() && raw[0] == ' ' && raw.compare(1, std::string::npos, clean) == 0;
    const std::string & text = space_prefix ? raw : clean;
    Napi::Object out = Napi::Object::New(env);
    auto bytes = Napi::Uint8Array::New(env, text.size());
    if (!text.empty()) std::memcpy(bytes.Data(), text.data(), text.size());
    out.Set("bytes", bytes);
    out.Set("spacePrefix", Napi::Boolean::New(env, space_prefix));
    return out;
}

}  // namespace

void init_pieces(Napi::Env env, Napi::Object exports) {
    exports.Set("tokenPiece", Napi::Function::New(env, TokenPiece, "tokenPiece"));
}
