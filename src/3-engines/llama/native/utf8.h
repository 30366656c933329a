// Well-formed UTF-8 across tokens, for sampling under a grammar (loop.cpp).
// llama.cpp's grammar decodes a multi-byte character without checking its continuation bytes: a
// 4-byte lead followed by three ASCII bytes counts as one character in range, so a string held to
// 20 characters comes out as 19 and four U+FFFD (found by the AI SDK's zod .max(20)), and an
// overlong encoding of '"' would close a JSON string the client sees open. A slot under a grammar
// therefore also keeps to well-formed UTF-8 (Unicode's table 3-7): each token moves a small state
// (what the next byte may be) and a token whose bytes break it is refused.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace utf8 {

// S0: a character may start; C1..C3: that many continuation bytes (80–BF) to come; the others:
// the byte after E0 / ED / F0 / F4, whose range is narrower (no overlongs, surrogates, > U+10FFFF).
enum State : uint8_t { S0 = 0, C1, C2, C3, AFTER_E0, AFTER_ED, AFTER_F0, AFTER_F4, N_STATES, BAD = 255 };

inline uint8_t step(uint8_t s, uint8_t b) {
    auto cont = [&](uint8_t lo, uint8_t hi, uint8_t next) -> uint8_t { return b >= lo && b <= hi ? next : BAD; };
    switch (s) {
        case S0:
            if (b < 0x80) return S0;
            if (b >= 0xC2 && b <= 0xDF) return C1;
            if (b == 0xE0) return AFTER_E0;
            if (b == 0xED) return AFTER_ED;
            if (b >= 0xE1 && b <= 0xEF) return C2;
            if (b == 0xF0) return AFTER_F0;
            if (b >= 0xF1 && b <= 0xF3) return C3;
            if (b == 0xF4) return AFTER_F4;
            return BAD;
        case C1: return cont(0x80, 0xBF, S0);
        case C2: return cont(0x80, 0xBF, C1);
        case C3: return cont(0x80, 0xBF, C2);
        case AFTER_E0: return cont(0xA0, 0xBF, C1);
        case AFTER_ED: return cont(0x80, 0x9F, C1);
        case AFTER_F0: return cont(0x90, 0xBF, C2);
        case AFTER_F4: return cont(0x80, 0x8F, C2);
        default: return BAD;
    }
}

// next[state * n_vocab + token]: the state after the token's bytes, or BAD. A token with no bytes
// (a control token, end of generation) keeps S0 and is refused inside a character.
class Table {
  public:
    void build(const llama_vocab * vocab) {
        n_ = llama_vocab_n_tokens(vocab);
        next_.assign((size_t) N_STATES * n_, BAD);
        std::vector<char> buf(256);
        for (int32_t t = 0; t < n_; t++) {
            int32_t len = llama_token_to_piece(vocab, t, buf.data(), (int32_t) buf.size(), 0, false);
            if (len < 0) {
                buf.resize((size_t) -len);
                len = llama_token_to_piece(vocab, t, buf.data(), (int32_t) buf.size(), 0, false);
            }
            for (uint8_t s = 0; s < N_STATES; s++) {
                uint8_t cur = len > 0 || s == S0 ? s : BAD;
                for (int32_t i = 0; i < len && cur != BAD; i++) cur = step(cur, (uint8_t) buf[i]);
                next_[(size_t) s * n_ + t] = cur;
            }
        }
    }
    bool built() const { return n_ > 0; }
    uint8_t next(uint8_t state, llama_token t) const { return next_[(size_t) state * n_ + t]; }

  private:
    int32_t n_ = 0;
    std::vector<uint8_t> next_;
};

}  // namespace utf8
