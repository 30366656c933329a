// The addon's binding over llama.cpp's multimodal library (mtmd), for image input:
//   loadProjector(model, path, options)  -> Promise<Projector>   (mtmd_init_from_file)
//   Projector.info()                     -> { vision, audio, mrope, nEmbd, marker, backend }
//   Projector.tokenize(rgb, w, h, id)    -> Promise<Span>  (the image's chunks: e.g. <start_of_image>, image, <end_of_image>)
//   Projector.encode(span)               -> Promise<void>  (runs the vision tower; embeddings kept in the span)
//   Projector.decode(loop, span, nPast, seqId, nBatch) -> Promise<number>  (decodes the span into a sequence through the
//                                        context's decode loop, loop.cpp; new n_past)
//   Span.nTokens / Span.nPos
// The caller serialises encode per projector.

#include <napi.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "llama.h"
#include "mtmd-helper.h"
#include "nlc.h"
#include "mtmd.h"

namespace {

// llama.cpp's multimodal log: errors only, also kept (the tail) to put into the error a call rejects with.
// A thread loading a projector also keeps its other lines (capture), to learn which backend clip chose.
std::mutex log_mutex;
std::string last_errors;
thread_local std::string * capture = nullptr;
void quiet_log(ggml_log_level level, const char * text, void *) {
    if (capture) *capture += text;
    if (level != GGML_LOG_LEVEL_ERROR) return;
    fputs(text, stderr);
    std::lock_guard<std::mutex> lock(log_mutex);
    last_errors += text;
    if (last_errors.size() > 600) last_errors.erase(0, last_errors.size() - 600);
}
std::string take_errors() {
    std::lock_guard<std::mutex> lock(log_mutex);
    std::string out;
    out.swap(last_errors);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    for (auto & c : out) if (c == '\n') c = ' ';
    return out;
}

struct SpanData {
    mtmd_input_chunks * chunks = nullptr;
    // Embeddings of each media chunk (empty for text chunks), filled by encode.
    std::vector<std::vector<float>> embd;
    bool encoded = false;
    ~SpanData() {
        if (chunks) mtmd_input_chunks_free(chunks);
    }
};

class Span : public Napi::ObjectWrap<Span> {
  public:
    static Napi::FunctionReference ctor;
    std::shared_ptr<SpanData> data;
    explicit Span(const Napi::CallbackInfo & info) : Napi::ObjectWrap<Span>(info) {}
    static Napi::Function define(Napi::Env env) {
        return DefineClass(env, "MtmdSpan", {
            InstanceAccessor<&Span::NTokens>("nTokens"),
            InstanceAccessor<&Span::NPos>("nPos"),
            InstanceAccessor<&Span::Encoded>("encoded"),
        });
    }
    Napi::Value NTokens(const Napi::CallbackInfo & info) {
        return Napi::Number::New(info.Env(), (double) mtmd_helper_get_n_tokens(data->chunks));
    }
    Napi::Value NPos(const Napi::CallbackInfo & info) {
        return Napi::Number::New(info.Env(), (double) mtmd_helper_get_n_pos(data->chunks));
    }
    Napi::Value Encoded(const Napi::CallbackInfo & info) { return Napi::Boolean::New(info.Env(), data->encoded); }
};
Napi::FunctionReference Span::ctor;

struct ProjectorData {
    mtmd_context * mctx = nullptr;
    const llama_model * model = nullptr;
    // The ggml backend clip computes on ("Vulkan0", "CUDA0", "CPU"), as clip logged it at load; empty if it did not say.
    std::string backend;
    ~ProjectorData() {
        if (mctx) mtmd_free(mctx);
    }
};

class Projector : public Napi::ObjectWrap<Projector> {
  public:
    static Napi::FunctionReference ctor;
    std::shared_ptr<ProjectorData> data;
    explicit Projector(const Napi::CallbackInfo & info) : Napi::ObjectWrap<Projector>(info) {}
    static Napi::Function define(Napi::Env env) {
        return DefineClass(env, "MtmdProjector", {
            InstanceMethod<&Projector::Info>("info"),
            InstanceMethod<&Projector::Tokenize>("tokenize"),
            InstanceMethod<&Projector::Encode>("encode"),
            InstanceMethod<&Projector::Decode>("decode"),
            InstanceMethod<&Projector::Dispose>("dispose"),
        });
    }
    bool alive(const Napi::Env & env) {
        if (data && data->mctx) return true;
        Napi::Error::New(env, "the projector was disposed").ThrowAsJavaScriptException();
        return false;
    }
    Napi::Value Info(const Napi::CallbackInfo & info);
    Napi::Value Tokenize(const Napi::CallbackInfo & info);
    Napi::Value Encode(const Napi::CallbackInfo & info);
    Napi::Value Decode(const Napi::CallbackInfo & info);
    Napi::Value Dispose(const Napi::CallbackInfo & info) {
        data.reset();
        return info.Env().Undefined();
    }
};
Napi::FunctionReference Projector::ctor;

// A promise settled by a worker thread's result.
class PromiseWorker : public Napi::AsyncWorker {
  public:
    explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred(Napi::Promise::Deferred::New(env)) {}
    Napi::Promise promise() { return deferred.Promise(); }
  protected:
    Napi::Promise::Deferred deferred;
    void OnError(const Napi::Error & e) override { deferred.Reject(e.Value()); }
};

class LoadWorker : public PromiseWorker {
  public:
    LoadWorker(Napi::Env env, const llama_model * model, std::string path, mtmd_context_params params)
        : PromiseWorker(env), model(model), path(std::move(path)), params(params) {}
    void Execute() override {
        take_errors();
        std::string lines;
        capture = &lines;
        mctx = mtmd_init_from_file(path.c_str(), model, params);
        capture = nullptr;
        // clip_ctx: "CLIP using <backend> backend" (mtmd has no getter for it)
        const std::string key = "CLIP using ";
        size_t at = lines.find(key);
        if (at != std::string::npos) {
            size_t end = lines.find(" backend", at + key.size());
            if (end != std::string::npos) backend = lines.substr(at + key.size(), end - at - key.size());
        }
        if (!mctx) {
            std::string why = take_errors();
            SetError("llama.cpp could not load the projector " + path + (why.empty() ? std::string() : ": " + why));
        }
    }
    void OnOK() override {
        Napi::Object obj = Projector::ctor.New({});
        auto * p = Projector::Unwrap(obj);
        p->data = std::make_shared<ProjectorData>();
        p->data->mctx = mctx;
        p->data->model = model;
        p->data->backend = backend;
        deferred.Resolve(obj);
    }
  private:
    const llama_model * model;
    std::string path;
    mtmd_context_params params;
    mtmd_context * mctx = nullptr;
    std::string backend;
};

Napi::Value LoadProjector(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    llama_model * model = model_of(env, info[0]);
    if (!model) {
        Napi::TypeError::New(env, "loadProjector: the first argument is not a loaded node-llama-cpp model").ThrowAsJavaScriptException();
        return env.Null();
    }
    if (!info[1].IsString()) {
        Napi::TypeError::New(env, "loadProjector: the projector path must be a string").ThrowAsJavaScriptException();
        return env.Null();
    }
    mtmd_context_params params = mtmd_context_params_default();
    params.print_timings = false;
    params.warmup = false;
    if (info[2].IsObject()) {
        Napi::Object o = info[2].As<Napi::Object>();
        if (o.Has("useGpu")) params.use_gpu = o.Get("useGpu").ToBoolean();
        if (o.Has("threads")) params.n_threads = o.Get("threads").ToNumber().Int32Value();
        if (o.Has("maxImageTokens")) params.image_max_tokens = o.Get("maxImageTokens").ToNumber().Int32Value();
    }
    auto * w = new LoadWorker(env, model, info[1].As<Napi::String>().Utf8Value(), params);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
}

Napi::Value Projector::Info(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (!alive(env)) return env.Null();
    Napi::Object o = Napi::Object::New(env);
    o.Set("vision", mtmd_support_vision(data->mctx));
    o.Set("audio", mtmd_support_audio(data->mctx));
    o.Set("mrope", mtmd_decode_use_mrope(data->mctx));
    o.Set("nEmbd", llama_model_n_embd_inp(data->model));
    o.Set("marker", mtmd_get_marker(data->mctx));
    o.Set("backend", data->backend);
    return o;
}

class TokenizeWorker : public PromiseWorker {
  public:
    TokenizeWorker(Napi::Env env, std::shared_ptr<ProjectorData> p, std::vector<unsigned char> rgb, uint32_t nx, uint32_t ny, std::string id)
        : PromiseWorker(env), p(std::move(p)), rgb(std::move(rgb)), nx(nx), ny(ny), id(std::move(id)) {}
    void Execute() override {
        mtmd_bitmap * bmp = mtmd_bitmap_init(nx, ny, rgb.data());
        if (!bmp) return SetError("mtmd could not take the image bitmap");
        mtmd_bitmap_set_id(bmp, id.c_str());
        span = std::make_shared<SpanData>();
        span->chunks = mtmd_input_chunks_init();
        const char * marker = mtmd_get_marker(p->mctx);
        mtmd_input_text text{marker, strlen(marker), false, true};
        const mtmd_bitmap * bitmaps[] = {bmp};
        int32_t res = mtmd_tokenize(p->mctx, span->chunks, &text, bitmaps, 1);
        mtmd_bitmap_free(bmp);
        if (res != 0) SetError("mtmd could not preprocess the image (code " + std::to_string(res) + ")");
        span->embd.resize(mtmd_input_chunks_size(span->chunks));
    }
    void OnOK() override {
        Napi::Object obj = Span::ctor.New({});
        Span::Unwrap(obj)->data = span;
        deferred.Resolve(obj);
    }
  private:
    std::shared_ptr<ProjectorData> p;
    std::vector<unsigned char> rgb;
    uint32_t nx, ny;
    std::string id;
    std::shared_ptr<SpanData> span;
};

Napi::Value Projector::Tokenize(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (!alive(env)) return env.Null();
    if (!info[0].IsTypedArray() || !info[1].IsNumber() || !info[2].IsNumber()) {
        Napi::TypeError::New(env, "tokenize(rgb: Uint8Array, width, height, id)").ThrowAsJavaScriptException();
        return env.Null();
    }
    auto arr = info[0].As<Napi::Uint8Array>();
    uint32_t nx = info[1].As<Napi::Number>().Uint32Value(), ny = info[2].As<Napi::Number>().Uint32Value();
    if (nx == 0 || ny == 0 || arr.ByteLength() != (size_t) nx * ny * 3) {
        Napi::RangeError::New(env, "tokenize: rgb must hold width*height*3 bytes").ThrowAsJavaScriptException();
        return env.Null();
    }
    std::vector<unsigned char> rgb(arr.Data(), arr.Data() + arr.ByteLength());
    std::string id = info[3].IsString() ? info[3].As<Napi::String>().Utf8Value() : std::string();
    auto * w = new TokenizeWorker(env, data, std::move(rgb), nx, ny, std::move(id));
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
}

class EncodeWorker : public PromiseWorker {
  public:
    EncodeWorker(Napi::Env env, std::shared_ptr<ProjectorData> p, std::shared_ptr<SpanData> span)
        : PromiseWorker(env), p(std::move(p)), span(std::move(span)) {}
    void Execute() override {
        const int n_embd = llama_model_n_embd_inp(p->model);
        for (size_t i = 0; i < mtmd_input_chunks_size(span->chunks); i++) {
            const mtmd_input_chunk * c = mtmd_input_chunks_get(span->chunks, i);
            if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
            if (mtmd_encode_chunk(p->mctx, c) != 0) return SetError("the projector failed to encode the image");
            const float * out = mtmd_get_output_embd(p->mctx);
            const size_t n = (size_t) n_embd * mtmd_input_chunk_get_n_tokens(c);
            span->embd[i].assign(out, out + n);
        }
        span->encoded = true;
    }
    void OnOK() override { deferred.Resolve(Env().Undefined()); }
  private:
    std::shared_ptr<ProjectorData> p;
    std::shared_ptr<SpanData> span;
};

std::shared_ptr<SpanData> span_of(Napi::Value v) {
    if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(Span::ctor.Value())) return nullptr;
    return Span::Unwrap(v.As<Napi::Object>())->data;
}

Napi::Value Projector::Encode(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (!alive(env)) return env.Null();
    auto span = span_of(info[0]);
    if (!span) {
        Napi::TypeError::New(env, "encode(span): not a span of this addon").ThrowAsJavaScriptException();
        return env.Null();
    }
    auto * w = new EncodeWorker(env, data, span);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
}

class DecodeWorker : public PromiseWorker {
  public:
    DecodeWorker(Napi::Env env, std::shared_ptr<ProjectorData> p, std::shared_ptr<SpanData> span, DecodeLoopTasks * loop,
                 llama_pos n_past, llama_seq_id seq, int32_t n_batch)
        : PromiseWorker(env), p(std::move(p)), span(std::move(span)), loop(loop), n_past(n_past), seq(seq), n_batch(n_batch) {}
    void Execute() override {
        // on the loop's thread, which owns the context, between two of its decode steps
        std::string failure;
        const int rc = loop->run_task([&](llama_context * lctx) {
            // the part of the sequence's cache the image replaces (the loop trims at a request's start only)
            llama_memory_seq_rm(llama_get_memory(lctx), seq, n_past, -1);
            for (size_t i = 0; i < mtmd_input_chunks_size(span->chunks); i++) {
                const mtmd_input_chunk * c = mtmd_input_chunks_get(span->chunks, i);
                llama_pos next = n_past;
                int32_t res;
                if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT)
                    res = mtmd_helper_eval_chunk_single(p->mctx, lctx, c, n_past, seq, n_batch, false, &next);
                else
                    res = mtmd_helper_decode_image_chunk(p->mctx, lctx, c, span->embd[i].data(), n_past, seq, n_batch, &next, nullptr, nullptr);
                if (res != 0) {
                    failure = "llama.cpp failed to decode the image into the context (code " + std::to_string(res) + ")";
                    return res;
                }
                n_past = next;
            }
            return 0;
        });
        if (!failure.empty()) return SetError(failure);
        if (rc != 0) return SetError("the chat model's decode loop closed before the image was decoded");
    }
    void OnOK() override { deferred.Resolve(Napi::Number::New(Env(), n_past)); }
  private:
    std::shared_ptr<ProjectorData> p;
    std::shared_ptr<SpanData> span;
    DecodeLoopTasks * loop;
    llama_pos n_past;
    llama_seq_id seq;
    int32_t n_batch;
};

// decode(loop, span, nPast, seqId, nBatch): through the context's decode loop, which owns the context.
Napi::Value Projector::Decode(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (!alive(env)) return env.Null();
    DecodeLoopTasks * loop = decode_loop_of(info[0]);
    auto span = span_of(info[1]);
    if (!loop || loop->model() != data->model || !span || !info[2].IsNumber() || !info[3].IsNumber() || !info[4].IsNumber()) {
        Napi::TypeError::New(env, "decode(decode loop of a context of this model, span, nPast, seqId, nBatch)").ThrowAsJavaScriptException();
        return env.Null();
    }
    if (!span->encoded) {
        Napi::Error::New(env, "decode: the span was not encoded").ThrowAsJavaScriptException();
        return env.Null();
    }
    auto * w = new DecodeWorker(env, data, span, loop, info[2].As<Napi::Number>().Int32Value(), info[3].As<Napi::Number>().Int32Value(),
                                info[4].As<Napi::Number>().Int32Value());
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
}

}  // namespace

void init_mtmd(Napi::Env env, Napi::Object exports) {
    mtmd_log_set(quiet_log, nullptr);
    mtmd_helper_log_set(quiet_log, nullptr);
    Projector::ctor = Napi::Persistent(Projector::define(env));
    Span::ctor = Napi::Persistent(Span::define(env));
    exports.Set("loadProjector", Napi::Function::New(env, LoadProjector));
    exports.Set("defaultMarker", Napi::String::New(env, mtmd_default_marker()));
}
