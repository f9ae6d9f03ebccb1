// minimalloc_validate FILE.csv [CAPACITY]: MiniMalloc's own validator on a CSV with offsets.
//
// Reads FILE.csv with MiniMalloc's FromCsv, takes the solution from its offset column
// (Problem::strip_solution), sets the capacity to CAPACITY (by default the highest
// offset + size, so that only the overlap, alignment and offset rules can fail) and calls
// Validate. Prints "PASS height N" and exits 0, or "FAIL <result>" and exits 1 (a file
// FromCsv refuses is a FAIL too); a wrong command line or an unreadable file exits 2.
// `bench/interchange_bench.py --validator PATH` runs it on memplan's CSV exports.
//
// Not part of memplan's build or CI. Build it against a google/minimalloc checkout MM
// (its Abseil installed, e.g. Debian's libabsl-dev):
//   g++ -std=c++17 -O2 -I MM/src bench/minimalloc_validate.cc MM/src/converter.cc
//       MM/src/minimalloc.cc MM/src/validator.cc -labsl_statusor -labsl_status
//       -labsl_strings -labsl_throw_delegate -labsl_raw_hash_set -labsl_hash
//       -o minimalloc_validate
// (one command; MiniMalloc's object files built by its own build serve as well as its .cc).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "converter.h"
#include "minimalloc.h"
#include "validator.h"

namespace {

const char* ResultName(minimalloc::ValidationResult result) {
  switch (result) {
    case minimalloc::kGood: return "kGood";
    case minimalloc::kBadSolution: return "kBadSolution";
    case minimalloc::kBadFixed: return "kBadFixed";
    case minimalloc::kBadOffset: return "kBadOffset";
    case minimalloc::kBadOverlap: return "kBadOverlap";
    case minimalloc::kBadAlignment: return "kBadAlignment";
    case minimalloc::kBadHeight: return "kBadHeight";
  }
  return "unknown";
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: " << argv[0] << " FILE.csv [CAPACITY]\n";
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::cerr << argv[1] << ": cannot be opened\n";
    return 2;
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<minimalloc::Problem> problem = minimalloc::FromCsv(text.str());
  if (!problem.ok()) {
    std::cout << "FAIL FromCsv: " << problem.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<minimalloc::Solution> solution = problem->strip_solution();
  if (!solution.ok()) {
    std::cout << "FAIL strip_solution: " << solution.status().message() << "\n";
    return 1;
  }
  // strip_solution leaves the height at 0; Validate wants the highest end.
  for (size_t i = 0; i < problem->buffers.size(); ++i) {
    solution->height = std::max(solution->height, solution->offsets[i] + problem->buffers[i].size);
  }
  problem->capacity = solution->height;
  if (argc == 3 && !absl::SimpleAtoi(argv[2], &problem->capacity)) {
    std::cerr << "CAPACITY " << argv[2] << " is not an integer\n";
    return 2;
  }
  const minimalloc::ValidationResult result = minimalloc::Validate(*problem, *solution);
  if (result != minimalloc::kGood) {
    std::cout << "FAIL " << ResultName(result) << "\n";
    return 1;
  }
  std::cout << "PASS height " << solution->height << "\n";
  return 0;
}
