// Everything an application needs: #include <ferry/ferry.hpp>
#pragma once

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/graph.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/runtime/task.hpp"
