// node-llama-cpp's native model and context, borrowed: this addon unwraps node-llama-cpp's own
// wrapper objects (napi_unwrap) to reach the llama_model / llama_context they own.
#pragma once

#include <napi.h>

#include <functional>
#include <vector>

#include "llama.h"

// The leading members of node-llama-cpp 3.22.1's AddonModel and AddonContext (llama/addon/*.h).
// Only the pointers are read, and each is checked against llama.cpp before use.
struct NlcModelHead {
    llama_model_params model_params;
    std::vector<llama_model_kv_override> kv_overrides;
    llama_model * model;
};
struct NlcContextHead {
    void * addon_model;
    llama_context_params context_params;
    llama_context * ctx;
};

// ObjectWrap<T> keeps no state that depends on T, so the members start at the same offset for
// every T: unwrap as a stand-in wrapper and read the members that follow its base.
class WrapBase : public Napi::ObjectWrap<WrapBase> {
  public:
    explicit WrapBase(const Napi::CallbackInfo & info) : Napi::ObjectWrap<WrapBase>(info) {}
};
template <typename Head> Head * head_of(napi_env env, Napi::Value v) {
    void * raw = nullptr;
    if (!v.IsObject() || napi_unwrap(env, v, &raw) != napi_ok || raw == nullptr) return nullptr;
    auto * base = static_cast<Napi::ObjectWrap<WrapBase> *>(raw);
    return reinterpret_cast<Head *>(reinterpret_cast<char *>(base) + sizeof(Napi::ObjectWrap<WrapBase>));
}

inline llama_model * model_of(const Napi::Env & env, Napi::Value v) {
    auto * h = head_of<NlcModelHead>(env, v);
    if (!h || !h->model) return nullptr;
    if (llama_model_n_embd(h->model) <= 0) return nullptr;
    return h->model;
}

inline llama_context * context_of(const Napi::Env & env, Napi::Value v, const llama_model * expected_model) {
    auto * h = head_of<NlcContextHead>(env, v);
    if (!h || !h->ctx) return nullptr;
    if (llama_get_model(h->ctx) != expected_model) return nullptr;  // a different model's context, or not a context
    return h->ctx;
}

// A chat context's decode loop (loop.cpp), which owns the context: work on the context from another
// thread runs through it, between two decode steps.
class DecodeLoopTasks {
  public:
    virtual ~DecodeLoopTasks() = default;
    /** Runs `task` on the loop's thread between two steps and returns its result; blocks the caller. */
    virtual int run_task(const std::function<int(llama_context *)> & task) = 0;
    virtual const llama_model * model() const = 0;
};
/** The loop a JS value wraps, or null. */
DecodeLoopTasks * decode_loop_of(Napi::Value v);

void init_loop(Napi::Env env, Napi::Object exports);
void init_mtmd(Napi::Env env, Napi::Object exports);
void init_threadpool(Napi::Env env, Napi::Object exports);
void init_grammar(Napi::Env env, Napi::Object exports);
void init_pieces(Napi::Env env, Napi::Object exports);
void init_tokens(Napi::Env env, Napi::Object exports);
void init_score(Napi::Env env, Napi::Object exports);
