#include "tide/memory/tensor_state.h"

namespace tide {

std::string_view tensor_state_name(TensorState s) {
  switch (s) {
    case TensorState::FREE:
      return "FREE";
    case TensorState::HOLD:
      return "HOLD";
    case TensorState::COMPUTE:
      return "COMPUTE";
    case TensorState::HOLD_AFTER_FWD:
      return "HOLD_AFTER_FWD";
    case TensorState::HOLD_AFTER_BWD:
      return "HOLD_AFTER_BWD";
    case TensorState::READY_FOR_REDUCE:
      return "READY_FOR_REDUCE";
  }
  return "?";
}

bool is_legal_transition(TensorState from, TensorState to) {
  using S = TensorState;
  if (to == S::FREE) return from != S::COMPUTE;  // never free a tensor an op is using
  switch (from) {
    case S::FREE:
      return to == S::COMPUTE || to == S::HOLD;
    case S::HOLD:
    case S::HOLD_AFTER_FWD:
    case S::HOLD_AFTER_BWD:
      return to == S::COMPUTE || to == S::HOLD || to == S::READY_FOR_REDUCE;
    case S::COMPUTE:
      return to == S::HOLD || to == S::HOLD_AFTER_FWD || to == S::HOLD_AFTER_BWD;
    case S::READY_FOR_REDUCE:
      return to == S::HOLD || to == S::COMPUTE;
  }
  return false;
}

}  // namespace tide
