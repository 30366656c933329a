// The appliance's native addon for llama.cpp, beside node-llama-cpp's own: it borrows
// node-llama-cpp's llama_model / llama_context (nlc.h) and adds what node-llama-cpp lacks:
//   image input through llama.cpp's multimodal library (mtmd-addon.cpp)
//   a persistent CPU threadpool per context (threadpool.cpp)
//   JSON Schema → GBNF through llama.cpp's own converter (grammar.cpp)
//   the decode loop of a chat context on a native thread (loop.cpp)
//   a token's text as bytes, for streaming output (pieces.cpp)
//   a long text's tokens counted off the JavaScript thread (tokens.cpp)
//   continuations of a prompt scored by the model's probabilities (score.cpp)
// Built from the llama.cpp source node-llama-cpp ships, against its prebuilt shared libraries
// (CMakeLists.txt, build.ts), so the process has one llama.cpp.

#include <napi.h>

#include "nlc.h"

namespace {
Napi::Object Init(Napi::Env env, Napi::Object exports) {
    init_mtmd(env, exports);
    init_threadpool(env, exports);
    init_grammar(env, exports);
    init_loop(env, exports);
    init_pieces(env, exports);
    init_tokens(env, exports);
    init_score(env, exports);
    return exports;
}
}  // namespace

NODE_API_MODULE(appliance_llama, Init)
