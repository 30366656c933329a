// Drives the decode loop's scheduling headers (src/3-engines/llama/native: step-cost.h,
// prompt-order.h) from lines on stdin, for step-budget.test.ts: the same code the loop runs, fed
// step costs the test chooses, so its decisions are checked without wall time.
//   cost MAX_GEN                         a new StepCost
//   rec GEN PROMPT DECODE_MS STEP_MS     a step the loop ran
//   budget GEN GAP_LIMIT CAP WAITING [SLOWDOWN]   prints the budget
//   order DECODED ID LEFT ARRIVED DONE ... prints the ids in order
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "prompt-order.h"
#include "step-cost.h"

int main() {
    std::unique_ptr<StepCost> cost;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string op;
        in >> op;
        if (op == "cost") {
            int32_t g;
            in >> g;
            cost = std::make_unique<StepCost>(g);
        } else if (op == "rec") {
            int32_t g, p;
            double d, s;
            in >> g >> p >> d >> s;
            cost->record(g, p, d, s);
        } else if (op == "budget") {
            int32_t g, cap;
            double gap;
            int64_t waiting;
            in >> g >> gap >> cap >> waiting;
            double slowdown = StepCost::SLOWDOWN, given = 0;
            if (in >> given) slowdown = given;
            std::cout << cost->budget(g, gap, cap, waiting, slowdown) << "\n";
        } else if (op == "order") {
            uint64_t decoded;
            in >> decoded;
            std::vector<WaitingPrompt> w;
            WaitingPrompt p{};
            while (in >> p.id >> p.left >> p.arrived >> p.done) w.push_back(p);
            for (size_t i : prompt_order(w, decoded)) std::cout << w[i].id << " ";
            std::cout << "\n";
        }
        std::cout.flush();
    }
}
