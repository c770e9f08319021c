#pragma once
// Reading a request body under the server's body cap whatever its framing. cpp-httplib 0.11.4's
// payload limit (set_payload_max_length) checks only Content-Length: a chunked body, or one read
// until the peer closes, was appended to Request::body without bound. The POST handlers read
// their bodies through a ContentReader instead, and this caps what is kept.
#include <cstddef>
#include <string>

namespace httplib {
class ContentReader;
struct Request;
}  // namespace httplib

namespace fuselm::server {

/// The body of `req` read through `reader`, at most `max_bytes` of it (0: no limit). A body past
/// the cap is read on and discarded (so the connection stays in step, as cpp-httplib does for a
/// Content-Length past its limit) and throws ApiError 413 naming the cap and --max-body-mb; a
/// multipart body throws 415; a body that cannot be read (bad chunk framing, the peer gone,
/// a read timeout) throws 400.
std::string read_body_capped(const httplib::Request& req, const httplib::ContentReader& reader, size_t max_bytes);

/// "the request body is larger than this server accepts (N bytes; --max-body-mb)".
std::string body_too_large_message(size_t max_bytes);

}  // namespace fuselm::server
