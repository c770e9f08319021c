#pragma once
// A node's runtime value: a tensor, a scalar (shape arithmetic), or a list (split outputs, sizes).
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace fuselm::runtime {

struct Value {
  enum class Kind { none, tensor, integer, real, boolean, list, string };
  Kind kind = Kind::none;
  Tensor t;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::vector<Value> list;
  const char* s = nullptr;  // points into the IR (string arguments such as gelu's approximate)

  bool is_none() const { return kind == Kind::none; }
  bool is_tensor() const { return kind == Kind::tensor; }
  void set_tensor(const Tensor& x) { kind = Kind::tensor; t = x; }
  void set_int(int64_t x) { kind = Kind::integer; i = x; }
  void set_real(double x) { kind = Kind::real; f = x; }
  void set_bool(bool x) { kind = Kind::boolean; b = x; }
  /// Scalar as double (integer, real or boolean); throws std::runtime_error otherwise.
  double as_double() const;
  int64_t as_int() const;
};

}  // namespace fuselm::runtime
