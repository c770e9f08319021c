#pragma once
// Noticing a client that hung up while a non-streaming request is still generating. cpp-httplib
// 0.11 gives a plain handler no access to its socket (a streaming handler has DataSink), so the
// handler finds its connection's descriptor by its addresses once, and polls it while it waits.
#include <string>

namespace fuselm::server {

/// The descriptor of this process's TCP connection whose peer is remote_addr:remote_port (and
/// whose local port is local_port, when > 0); -1 when there is none. Scans /proc/self/fd.
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

/// Whether the peer of connected socket `fd` has closed or reset the connection (poll without
/// waiting: POLLRDHUP/POLLHUP/POLLERR, or a readable socket at end of stream).
bool peer_hung_up(int fd);

}  // namespace fuselm::server
