// Which transports UCX_TLS lets a UCX context open. UCX warns ("invalid
// configuration: ...", on stderr) at every worker's creation about a
// transport setting that no transport it opened read, so Worker::create
// gives a transport's settings only where UCX_TLS may open it.
#pragma once

#include <initializer_list>
#include <string_view>

namespace ferry::transport {

// True when UCX_TLS's value `tls` (null: unset, UCX's own choice of every
// transport) may open a transport among `names`: its own names and the
// aliases that include it, as UCX spells them ("tcp"; "sysv", "posix",
// "mm", "sm", "shm"). A list that starts with '^' names what is left out.
bool tls_may_open(const char* tls, std::initializer_list<std::string_view> names);

}  // namespace ferry::transport
