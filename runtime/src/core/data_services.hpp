// The core's side of data/data_host.hpp.
#pragma once

namespace ferry::detail {

// Makes the core the data layer's host (idempotent); before any buffer exists.
void install_data_host() noexcept;

}  // namespace ferry::detail
