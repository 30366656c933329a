// The order prompts waiting for their first token get a step's prompt tokens (issue 46): the fewest
// tokens left first, each counted less the prompt tokens decoded for other prompts since it came.
// A short prompt that arrives behind a long one starts first; a long one moves forward as it waits,
// and behind a stream of short prompts that arrive after it, it is served once others took as many
// tokens as it has left. Prompts that came together keep the order of their sizes (they waited
// alike). Ties: the order they came.

#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

struct WaitingPrompt {
    uint32_t id;       // rising: the order requests came in
    int64_t left;      // prompt tokens still to decode
    uint64_t arrived;  // the loop's prompt tokens decoded, all prompts, when it came
    uint64_t done;     // its own prompt tokens decoded
};

/** Indexes of `w` in the order they get a step's prompt tokens; `decoded`: the loop's prompt tokens decoded so far. */
inline std::vector<size_t> prompt_order(const std::vector<WaitingPrompt> & w, uint64_t decoded) {
    std::vector<int64_t> key(w.size());
    for (size_t i = 0; i < w.size(); i++) key[i] = w[i].left - (int64_t) (decoded - w[i].arrived - w[i].done);
    std::vector<size_t> order(w.size());
    for (size_t i = 0; i < w.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] != key[b] ? key[a] < key[b] : w[a].id < w[b].id; });
    return order;
}
