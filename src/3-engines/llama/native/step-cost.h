// What a decode step costs on this model and device, learnt from the steps the loop ran (issue 46),
// and how many prompt tokens a step may carry beside generating slots.
//
// A generating slot gets one token a step, so its gap between tokens is the step's time. A step that
// also carries P prompt tokens takes longer, by a cost far from linear in P, and one that changes
// as the context fills:
//   - on any device a matrix product reads its weights once per step, so small steps waste it;
//   - on this 2-core CPU, steps under 64 prompt tokens deep in a context cost 2.5-7x more a token
//     than 64 (ggml's CPU attention takes a tiled path from a few dozen rows), but near the start
//     of a context about as much;
//   - attention grows with the context: the same step costs 2-4x more 4,000 tokens in.
// So sizes are compared by steps taken at the same depth: a step of one size between two of the
// size beside it (the two's mean cost a token is the cost at the middle one's depth). Each link k
// holds log(cost a token of 2^k prompt tokens / that of 2^(k+1)), an average over such steps
// (steps of a power of two, the room left counting as the nearest). From the links and the last
// step's own cost, the loop knows what each size costs now. The step alone of g generating tokens
// (decode, sampling, the loop's own work) is an exponential average (ALPHA) for each g.
// Beside generating slots a step carries P prompt tokens, the larger of
//   - P_gap: the most whose step stays within gap_limit times the generating slots' step alone;
//   - P_eff: the fewest that read a prompt at no more than `slowdown` (SLOWDOWN: 1.1) times the
//     least cost a token of any size (a long prompt beside a stream still finishes about as fast
//     as alone: where the device cannot do both, the stream's gap gives way, unless the operator
//     allows the prompt to slow down more).
// The loop learns the links from the top: a whole step first (as a prompt alone is read), then
// half of it, and so on down while the smaller size costs little more a token. The links beside
// the size chosen are measured again once STALE prompt tokens were read since (the context has grown).

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

class StepCost {
  public:
    static constexpr double ALPHA = 0.25;
    static constexpr double LINK_ALPHA = 0.5;
    /** By default, a prompt beside generating slots is read at no more than this times its least cost a token. */
    static constexpr double SLOWDOWN = 1.1;
    /** Prompt tokens a step carries beside generating slots before the loop has measured them alone. */
    static constexpr int32_t COLD = 64;
    static constexpr int32_t SIZES = 20;
    /** Prompt tokens read after which the links beside the size chosen are measured again. */
    static constexpr uint64_t STALE = 2048;

    explicit StepCost(int32_t max_gen)
        : step_ms_(max_gen + 1, NAN), decode_ms_(max_gen + 1, NAN), link_(SIZES, NAN), link_at_(SIZES, 0), latest_(SIZES, NAN), latest_at_(SIZES, 0) {}

    void record(int32_t gen, int32_t prompt, double decode_ms, double step_ms) {
        if (gen < 0 || prompt < 0 || !(decode_ms >= 0)) return;
        if (prompt == 0) {
            if (gen == 0) return;
            gen = std::min<int32_t>(gen, (int32_t) step_ms_.size() - 1);
            ema(step_ms_[gen], step_ms, ALPHA);
            ema(decode_ms_[gen], decode_ms, ALPHA);
            return;
        }
        const int32_t k = size_of(prompt);
        const double v = decode_ms / prompt;
        prompt_tokens_ += prompt;
        // a step of a size beside, between two of this size: the two's mean was taken at its depth
        if (before_.k == k && std::abs(last_.k - k) == 1 && v > 0 && last_.v > 0 && before_.v > 0) {
            const double around = (before_.v + v) / 2;
            const int32_t lo = std::min(k, last_.k);
            ema(link_[lo], lo == k ? std::log(around / last_.v) : std::log(last_.v / around), LINK_ALPHA);
            link_at_[lo] = prompt_tokens_;
        }
        latest_[k] = v;
        latest_at_[k] = ++prompt_steps_;
        before_ = last_;
        last_ = {k, v};
    }

    /**
     * Prompt tokens a step beside `gen` generating tokens carries (see above); between 1 and `cap`,
     * the room the step has for them; `waiting`: the prompt tokens waiting; `slowdown`: the most a
     * prompt's cost a token may grow to keep the gap (SLOWDOWN by default). gap_limit <= 0: `cap`
     * (no bound).
     */
    int32_t budget(int32_t gen, double gap_limit, int32_t cap, int64_t waiting, double slowdown = SLOWDOWN) const {
        if (cap < 1) return std::max(0, cap);
        if (gap_limit <= 0) return cap;
        const double alone = near(step_ms_, std::max(gen, 1)), alone_decode = near(decode_ms_, std::max(gen, 1));
        if (std::isnan(alone)) return std::min(cap, COLD);
        const double overhead = std::max(0.0, alone - alone_decode);  // sampling and the loop's own work, each step
        const int32_t top = size_of(cap);
        // rel[k]: log of size k's cost a token against the top size's, down to the first link not known
        std::vector<double> rel(top + 1, NAN);
        rel[top] = 0;
        int32_t known = top;
        while (known > 0 && !std::isnan(link_[known - 1])) {
            rel[known - 1] = rel[known] + link_[known - 1];
            known--;
        }
        double best = INFINITY;
        for (int32_t k = known; k <= top; k++) best = std::min(best, rel[k]);
        int32_t k_eff = top;
        for (int32_t k = known; k <= top; k++)
            if (rel[k] <= best + std::log(std::max(1.0, slowdown))) {
                k_eff = k;
                break;
            }
        // what a token costs now at size k: the latest step of a known size, through the links
        // (below the known ones, as much as the smallest known: steps cost no less a token as they shrink)
        int32_t recent = -1;
        for (int32_t k = known; k <= top; k++)
            if (!std::isnan(latest_[k]) && (recent < 0 || latest_at_[k] > latest_at_[recent])) recent = k;
        int32_t k_gap = -1;
        if (recent >= 0)
            for (int32_t k = 0; k <= top; k++) {
                const double per_token = latest_[recent] * std::exp(rel[std::max(k, known)] - rel[recent]);
                if (size(k, cap) * per_token + overhead <= gap_limit * alone) k_gap = k;
            }
        const int32_t k_p = std::max(k_gap, k_eff);
        const int32_t p = size(k_p, cap);
        // the rest of the prompts in one step, rather than a last small one after it
        if (waiting <= cap && waiting <= p + p / 2) return (int32_t) std::max<int64_t>(1, waiting);
        // a link beside the size chosen, not known or not lately: a step of the size beside it,
        // right after one of this size (the next is of this size again: the pair around it)
        if (last_.k == k_p) {
            if (k_p > 0 && stale(k_p - 1)) return size(k_p - 1, cap);
            if (k_p < top && stale(k_p)) return size(k_p + 1, cap);
        }
        return p;
    }

  private:
    std::vector<double> step_ms_, decode_ms_;
    std::vector<double> link_;        // log(cost a token at 2^k / at 2^(k+1))
    std::vector<uint64_t> link_at_;   // prompt_tokens_ when each link was last measured
    std::vector<double> latest_;      // the last step's cost a token at each size
    std::vector<uint64_t> latest_at_;
    uint64_t prompt_steps_ = 0, prompt_tokens_ = 0;
    struct Step {
        int32_t k = -1;  // size
        double v = 0;    // cost a token
    };
    Step last_, before_;  // the last two prompt steps

    bool stale(int32_t k) const { return std::isnan(link_[k]) || prompt_tokens_ - link_at_[k] >= STALE; }

    // the nearest power of two (the room left beside generating tokens, 511, is 512's size)
    static int32_t size_of(int32_t n) {
        int32_t k = 0;
        while (k + 1 < SIZES && (1 << (k + 1)) <= n) k++;
        if (k + 1 < SIZES && n - (1 << k) > (1 << (k + 1)) - n) k++;
        return k;
    }
    static int32_t size(int32_t k, int32_t cap) { return std::min(1 << k, cap); }

    static void ema(double & avg, double x, double alpha) { avg = std::isnan(avg) ? x : avg + alpha * (x - avg); }

    // the figure for g generating tokens, or the nearest g measured (fewer first)
    static double near(const std::vector<double> & v, int32_t g) {
        g = std::clamp<int32_t>(g, 0, (int32_t) v.size() - 1);
        for (int32_t d = 0; d < (int32_t) v.size(); d++) {
            if (g - d >= 1 && !std::isnan(v[g - d])) return v[g - d];
            if (g + d < (int32_t) v.size() && g + d >= 1 && !std::isnan(v[g + d])) return v[g + d];
        }
        return NAN;
    }
};
