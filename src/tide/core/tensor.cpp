#include "tide/core/tensor.h"

namespace tide {

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

void check_shape(const Tensor& t, const Shape& expected, const char* name) {
  TIDE_CHECK(t.shape == expected, "tensor '{}' has shape {} but {} was expected", name,
             t.shape.str(), expected.str());
}

}  // namespace tide
