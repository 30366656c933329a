// What a decode step costs on this model and device, learnt from the steps the loop ran (issue 46),
// and how many prompt tokens a step may carry beside generating slots.
//
// A generating slot gets one token a step, so its gap between tokens is the step's time. A step that
// also carries P prompt tokens takes longer, by a cost that is far from linear in P: on a CPU, 32
// prompt tokens deep in a context took 6x as long as 64 (ggml's attention takes a tiled path from a
// few dozen rows), and on any device a matrix product reads its weights once per step, so small steps
// waste it. The loop keeps, from its own steps:
//   - alone: the whole step (decode, sampling, the loop's own work) with g generating tokens and no
//     prompt, and its decode alone, for each g;
//   - per_token[k]: decode ms per prompt token of the steps that carried 2^k to 2^(k+1)-1 of them,
//     the least of its last SAMPLES steps (a step that another process, or the server's own
//     JavaScript, delayed says nothing about the size: one such step had 64-token steps taken at 4x
//     their cost and never tried again).
// Beside generating slots a step carries P prompt tokens, a power of two (or the room left), the larger of
//   - P_gap: the most whose step stays within gap_limit times the generating slots' step alone;
//   - P_eff: the fewest that read a prompt at no more than SLOWDOWN times the cost per token of
//     the cheapest size measured (a long prompt beside a stream still finishes about as fast as
//     alone: where the device cannot do both, the stream's gap gives way);
// The figures follow a context that fills (attention grows with it): the alone figures are
// exponential averages (ALPHA), a size's samples are its last few, and the size below the one
// chosen is tried again once its figure is STALE prompt steps old. A size never measured is taken
// at the nearest larger size's cost per token: the loop tries it, the smallest first, and keeps it
// only if it pays.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

class StepCost {
  public:
    static constexpr double ALPHA = 0.25;
    /** A prompt beside generating slots is read at no more than this times its cost per token alone. */
    static constexpr double SLOWDOWN = 1.1;
    /** Prompt tokens a step carries beside generating slots before the loop has measured any prompt. */
    static constexpr int32_t COLD = 64;
    static constexpr int32_t BUCKETS = 20;
    /** Prompt steps after which a size's figure is tried again. */
    static constexpr uint64_t STALE = 256;
    static constexpr int32_t SAMPLES = 2;

    explicit StepCost(int32_t max_gen) : step_ms_(max_gen + 1, NAN), decode_ms_(max_gen + 1, NAN), sizes_(BUCKETS) {}

    void record(int32_t gen, int32_t prompt, double decode_ms, double step_ms) {
        if (gen < 0 || prompt < 0 || !(decode_ms >= 0)) return;
        if (prompt == 0) {
            if (gen == 0) return;
            gen = std::min<int32_t>(gen, (int32_t) step_ms_.size() - 1);
            ema(step_ms_[gen], step_ms);
            ema(decode_ms_[gen], decode_ms);
            return;
        }
        Size & z = sizes_[bucket(prompt)];
        if (!fresh(z)) z.n = 0;  // measured again after a while: the old samples are of a shorter context
        z.samples[z.n++ % SAMPLES] = decode_ms / prompt;
        z.at = ++prompt_steps_;
    }

    /**
     * Prompt tokens a step beside `gen` generating tokens carries (see above); between 1 and `cap`,
     * the room the step has for them; `waiting`: the prompt tokens waiting. gap_limit <= 0: `cap`
     * (no bound).
     */
    int32_t budget(int32_t gen, double gap_limit, int32_t cap, int64_t waiting) const {
        if (cap < 1) return std::max(0, cap);
        if (gap_limit <= 0) return cap;
        const double alone = near(step_ms_, std::max(gen, 1)), alone_decode = near(decode_ms_, std::max(gen, 1));
        if (std::isnan(alone)) return std::min(cap, COLD);
        // the reference: the least cost per token of the sizes measured lately (else ever)
        double ref = INFINITY, ref_any = INFINITY;
        for (int32_t k = 0; k <= bucket(cap); k++) {
            const double v = sizes_[k].per_token();
            if (std::isnan(v)) continue;
            ref_any = std::min(ref_any, v);
            if (fresh(sizes_[k])) ref = std::min(ref, v);
        }
        if (!std::isfinite(ref)) ref = ref_any;
        if (!std::isfinite(ref)) return cap;  // nothing measured: a whole step, as a prompt alone is read
        const double overhead = std::max(0.0, alone - alone_decode);  // sampling and the loop's own work, each step
        int32_t p_gap = 0, p_eff = 0, p_cheapest = cap;
        double cheapest = INFINITY;
        for (int32_t k = 0; k < BUCKETS; k++) {
            const int32_t c = std::min(1 << k, cap);
            const double step = c * estimate(bucket(c)) + overhead;
            if (step <= gap_limit * alone) p_gap = c;
            if (p_eff == 0 && step / c <= SLOWDOWN * ref) p_eff = c;
            if (step / c < cheapest) cheapest = step / c, p_cheapest = c;
            if (c == cap) break;
        }
        if (p_eff == 0) p_eff = p_cheapest;
        const int32_t p = std::max(1, std::max(p_gap, p_eff));
        // the rest of the prompts in one step, rather than a last small one
        if (waiting <= cap && waiting <= p + p / 2) return (int32_t) waiting;
        // the size below, not measured lately, is tried again: the context has grown since, or it
        // was never tried (the loop comes down from the larger steps a prompt alone is read in)
        const int32_t down = (1 << bucket(p)) == p ? p / 2 : 1 << bucket(p);
        if (down >= 1 && !fresh(sizes_[bucket(down)])) return down;
        return p;
    }

    /** The measured step alone of `gen` generating tokens (ms; NaN before one). */
    double alone_ms(int32_t gen) const { return near(step_ms_, std::max(gen, 1)); }

  private:
    struct Size {
        double samples[SAMPLES];
        int32_t n = 0;    // samples taken (the last SAMPLES kept)
        uint64_t at = 0;  // prompt_steps_ when last measured
        double per_token() const {
            if (n == 0) return NAN;
            double least = samples[0];
            for (int32_t i = 1; i < std::min(n, SAMPLES); i++) least = std::min(least, samples[i]);
            return least;
        }
    };
    std::vector<double> step_ms_, decode_ms_;
    std::vector<Size> sizes_;
    uint64_t prompt_steps_ = 0;

    bool fresh(const Size & z) const { return z.n > 0 && prompt_steps_ - z.at < STALE; }

    static int32_t bucket(int32_t n) {
        int32_t k = 0;
        while (k + 1 < BUCKETS && (1 << (k + 1)) <= n) k++;
        return k;
    }

    static void ema(double & avg, double x) { avg = std::isnan(avg) ? x : avg + ALPHA * (x - avg); }

    // a size's cost per token as last measured; one never measured at the nearest smaller size's
    // (larger steps cost no more a token, as a rule: the loop finds out when it tries it), else
    // the nearest larger one's
    double estimate(int32_t k) const {
        if (sizes_[k].n) return sizes_[k].per_token();
        for (int32_t j = k - 1; j >= 0; j--)
            if (sizes_[j].n) return sizes_[j].per_token();
        for (int32_t j = k + 1; j < BUCKETS; j++)
            if (sizes_[j].n) return sizes_[j].per_token();
        return NAN;
    }

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
