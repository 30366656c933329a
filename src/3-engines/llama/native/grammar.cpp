// JSON Schema → GBNF through llama.cpp's own converter (common/json-schema-to-grammar.cpp), the
// reference for what a grammar can express: integer bounds, patterns, formats, allOf/anyOf, $ref.
// The result goes to node-llama-cpp as a plain GBNF grammar (llama.createGrammar).
//   jsonSchemaToGrammar(schemaJson: string): string   throws on a schema it cannot convert

#include <napi.h>

#include <cstdarg>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml.h"
#include "json-schema-to-grammar.h"
#include "llama-grammar.h"
#include "json.h"
#include "nlc.h"

// The few helpers of common.cpp / log.cpp the converter uses; linking all of libcommon would pull
// in the whole of llama.cpp's tooling (arguments, downloads, sampling).
std::string string_join(const std::vector<std::string> & values, const std::string & separator) {
    std::ostringstream out;
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) out << separator;
        out << values[i];
    }
    return out.str();
}

std::vector<std::string> string_split(const std::string & str, const std::string & delimiter) {
    std::vector<std::string> parts;
    size_t start = 0, end = str.find(delimiter);
    while (end != std::string::npos) {
        parts.push_back(str.substr(start, end - start));
        start = end + delimiter.length();
        end = str.find(delimiter, start);
    }
    parts.push_back(str.substr(start));
    return parts;
}

std::string string_repeat(const std::string & str, size_t n) {
    std::string result;
    result.reserve(str.length() * n);
    for (size_t i = 0; i < n; ++i) result += str;
    return result;
}

std::string string_format(const char * fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int size = vsnprintf(nullptr, 0, fmt, ap);
    std::vector<char> buf(size + 1);
    vsnprintf(buf.data(), size + 1, fmt, ap2);
    va_end(ap2);
    va_end(ap);
    return std::string(buf.data(), size);
}

// LOG_DBG in trie.cpp: never shown (verbosity threshold below debug).
struct common_log;
struct common_log * common_log_main() { return nullptr; }
int common_log_get_verbosity_thold(void) { return -1; }
void common_log_add(struct common_log *, enum ggml_log_level, const char *, ...) {}

namespace {
Napi::Value JsonSchemaToGrammar(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) {
        Napi::TypeError::New(env, "jsonSchemaToGrammar(schemaJson: string)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    try {
        auto schema = common_json::parse(info[0].As<Napi::String>().Utf8Value());
        return Napi::String::New(env, json_schema_to_grammar(schema, true));
    } catch (const std::exception & e) {
        Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
        return env.Undefined();
    }
}

// grammarCheck(gbnf) -> { states, rules }: parses a grammar as the decode loop will (llama.cpp's
// parser, its left-recursion check and its first parse states), with no vocabulary; throws when
// llama.cpp refuses it (its reason goes to the log). Run where a crash costs nothing (the grammar
// worker process, grammar-worker.ts).
Napi::Value GrammarCheck(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) {
        Napi::TypeError::New(env, "grammarCheck(gbnf: string)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    const std::string gbnf = info[0].As<Napi::String>().Utf8Value();
    llama_grammar * g = nullptr;
    try {
        g = llama_grammar_init_impl(nullptr, gbnf.c_str(), "root", false, nullptr, 0, nullptr, 0);
    } catch (const std::exception & e) {
        Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
        return env.Undefined();
    }
    if (!g) {
        Napi::Error::New(env, "llama.cpp's grammar parser refused it").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    Napi::Object out = Napi::Object::New(env);
    out.Set("states", (double) g->stacks.size());
    out.Set("rules", (double) g->rules.size());
    llama_grammar_free_impl(g);
    return out;
}
}  // namespace

void init_grammar(Napi::Env env, Napi::Object exports) {
    exports.Set("grammarCheck", Napi::Function::New(env, GrammarCheck));
    exports.Set("jsonSchemaToGrammar", Napi::Function::New(env, JsonSchemaToGrammar));
}
