#include "runtime/value.h"

#include <stdexcept>

namespace fuselm::runtime {

double Value::as_double() const {
  switch (kind) {
    case Kind::integer: return static_cast<double>(i);
    case Kind::real: return f;
    case Kind::boolean: return b ? 1.0 : 0.0;
    default: throw std::runtime_error("expected a scalar argument");
  }
}

int64_t Value::as_int() const {
  switch (kind) {
    case Kind::integer: return i;
    case Kind::boolean: return b ? 1 : 0;
    case Kind::real: return static_cast<int64_t>(f);
    default: throw std::runtime_error("expected an integer argument");
  }
}

}  // namespace fuselm::runtime
