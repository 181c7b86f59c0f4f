//===- Expect.h - the unit tests' one assertion macro -----------*- C++ -*-===//
//
// EXPECT(cond) counts a check and reports a failed one; main() prints
// "N passed, N failed" (a line CI reads) and returns non-zero on failures.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TEST_UNIT_EXPECT_H
#define MHC_TEST_UNIT_EXPECT_H

#include <cstdio>

inline int failures = 0, checks = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      std::fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__,   \
                   #cond);                                                     \
    }                                                                          \
  } while (0)

inline int summary() {
  std::printf("%d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}

#endif // MHC_TEST_UNIT_EXPECT_H
