#include "server/body_reader.h"

#include <fmt/core.h>
#include <httplib.h>

#include "server/api_error.h"

namespace fuselm::server {

std::string body_too_large_message(size_t max_bytes) {
  return fmt::format("the request body is larger than this server accepts ({} bytes; --max-body-mb)", max_bytes);
}

std::string read_body_capped(const httplib::Request& req, const httplib::ContentReader& reader, size_t max_bytes) {
  // cpp-httplib would call a multipart parser with no callbacks given through this reader.
  if (req.is_multipart_form_data()) throw ApiError(415, "multipart request bodies are not accepted; send JSON");
  std::string body;
  bool over = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (over || (max_bytes > 0 && body.size() + n > max_bytes)) {
      over = true;  // discarded, not kept: what is left is read only to keep the connection in step
      return true;
    }
    body.append(data, n);
    return true;
  });
  // A Content-Length past the cap fails the read before any byte (cpp-httplib skips the body).
  const bool declared_over = max_bytes > 0 && req.has_header("Content-Length") &&
                             req.get_header_value<uint64_t>("Content-Length") > max_bytes;
  if (over || declared_over) throw ApiError(413, body_too_large_message(max_bytes));
  if (!ok) throw ApiError(400, "the request body could not be read (bad chunked framing, a read timeout, or the client hung up)");
  return body;
}

}  // namespace fuselm::server
