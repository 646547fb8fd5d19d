#include "tide/model/activations.h"

#include "tide/core/error.h"

namespace tide {

ActivationPolicy parse_activation_policy(const std::string& s) {
  if (s == "none" || s == "save-all" || s == "save_all") return ActivationPolicy::SAVE_ALL;
  if (s == "selective") return ActivationPolicy::SELECTIVE;
  if (s == "full") return ActivationPolicy::FULL;
  TIDE_FAIL("unknown activation checkpointing policy '{}'; use none, selective or full", s);
}

const char* activation_policy_name(ActivationPolicy p) {
  switch (p) {
    case ActivationPolicy::SAVE_ALL:
      return "none";
    case ActivationPolicy::SELECTIVE:
      return "selective";
    case ActivationPolicy::FULL:
      return "full";
  }
  return "?";
}

}  // namespace tide
