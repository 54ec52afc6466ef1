// Status propagation and invariant checks used across the daemon (STYLE.md "Errors").
// ARD_RETURN_IF_ERROR / ARD_ASSIGN_OR_RETURN propagate likely failures as values;
// ARD_CHECK is for violated invariants only: it logs and aborts (systemd restarts the daemon).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ARD_CONCAT_INNER_(a, b) a##b
#define ARD_CONCAT_(a, b) ARD_CONCAT_INNER_(a, b)

#define ARD_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::absl::Status ard_status_ = (expr);           \
    if (!ard_status_.ok()) return ard_status_;     \
  } while (0)

#define ARD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(*tmp)

#define ARD_ASSIGN_OR_RETURN(lhs, expr) \
  ARD_ASSIGN_OR_RETURN_IMPL_(ARD_CONCAT_(ard_statusor_, __LINE__), lhs, expr)

#define ARD_CHECK(cond)                                                              \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "allreduced: CHECK failed at %s:%d: %s\n", __FILE__,      \
                   __LINE__, #cond);                                                 \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
