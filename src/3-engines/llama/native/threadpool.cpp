// A persistent CPU threadpool for a llama_context:
//   attachThreadpool(model, context, nThreads, poll) -> { detach() }
// node-llama-cpp's prebuilt CPU backend is built without OpenMP and attaches no threadpool, so
// ggml creates and joins its worker threads on every graph compute, once per decode step; on a
// small machine, where those threads and the JavaScript thread share few cores, a one-token step
// took 8 ms or 23 ms by turns (measured, 64M model, 2 threads). llama.cpp's own tools attach a
// pool made with ggml_threadpool_new (common.cpp); so does this. `poll` is ggml's polling level
// for idle workers (0: they sleep at once; 100: they spin longest).

#include <napi.h>

#include <string>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"
#include "nlc.h"

namespace {

struct Pool {
    llama_context * ctx;
    ggml_threadpool_t tp;
    void (*free_fn)(ggml_threadpool_t);
};

Napi::Value Detach(const Napi::CallbackInfo & info) {
    auto * pool = static_cast<Pool *>(info.Data());
    if (pool->tp) {
        llama_detach_threadpool(pool->ctx);
        pool->free_fn(pool->tp);
        pool->tp = nullptr;
    }
    return info.Env().Undefined();
}

Napi::Value AttachThreadpool(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    llama_model * model = model_of(env, info[0]);
    llama_context * lctx = model ? context_of(env, info[1], model) : nullptr;
    if (!lctx || !info[2].IsNumber() || !info[3].IsNumber()) {
        Napi::TypeError::New(env, "attachThreadpool(model, context of that model, nThreads, poll)").ThrowAsJavaScriptException();
        return env.Null();
    }
    const int n_threads = info[2].As<Napi::Number>().Int32Value();
    const int poll = info[3].As<Napi::Number>().Int32Value();
    if (n_threads < 1 || n_threads > GGML_MAX_N_THREADS || poll < 0 || poll > 100) {
        Napi::RangeError::New(env, "attachThreadpool: nThreads must be 1.." + std::to_string(GGML_MAX_N_THREADS) + " and poll 0..100").ThrowAsJavaScriptException();
        return env.Null();
    }
    // ggml_threadpool_new lives in the CPU backend, which ggml loads at run time (one build per CPU family)
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    using new_fn_t = ggml_threadpool_t (*)(ggml_threadpool_params *);
    using free_fn_t = void (*)(ggml_threadpool_t);
    auto new_fn = reg ? (new_fn_t) ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new") : nullptr;
    auto free_fn = reg ? (free_fn_t) ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free") : nullptr;
    if (!new_fn || !free_fn) {
        Napi::Error::New(env, "the CPU backend does not export ggml_threadpool_new").ThrowAsJavaScriptException();
        return env.Null();
    }
    ggml_threadpool_params params = ggml_threadpool_params_default(n_threads);
    params.poll = (uint32_t) poll;
    ggml_threadpool_t tp = new_fn(&params);
    if (!tp) {
        Napi::Error::New(env, "ggml_threadpool_new failed").ThrowAsJavaScriptException();
        return env.Null();
    }
    // one pool for prompt batches and single steps alike (node-llama-cpp sets both thread counts the same)
    llama_attach_threadpool(lctx, tp, tp);
    auto * pool = new Pool{lctx, tp, free_fn};
    Napi::Object handle = Napi::Object::New(env);
    handle.Set("detach", Napi::Function::New(env, Detach, "detach", pool));
    // the handle owns the Pool record; detach() must run before the context is freed
    handle.AddFinalizer([](Napi::Env, Pool * p) { delete p; }, pool);
    return handle;
}

}  // namespace

void init_threadpool(Napi::Env env, Napi::Object exports) {
    exports.Set("attachThreadpool", Napi::Function::New(env, AttachThreadpool));
}
