// Replicas: put (create, quota, store a chunk), get, free, and the client's counters.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"
#include "session.hpp"

namespace ferry::ferryd {

using protocol::Status;

namespace {

std::string describe_shape(DType dtype, std::uint64_t rows, std::uint64_t cols) {
  return fmt::format("{} x {} {}", rows, cols, to_string(dtype));
}

}  // namespace

void Session::on_put(const protocol::Put& put, transport::Incoming& incoming) {
  const std::uint64_t payload = incoming.payload_bytes();
  if (payload > server_.limits.max_payload)
    return fail(Status::malformed, fmt::format("put of {} bytes exceeds max_payload ({} bytes)", payload,
                                               server_.limits.max_payload));
  auto refuse = [&](Status status, std::string message) {
    send(protocol::PutAck{put.request, put.buffer, status, std::move(message)});
  };

  std::pair<Status, std::string> refusal;
  if (!shape_allowed(put.buffer, put.dtype, put.rows, put.cols, "put", refusal))
    return refuse(refusal.first, std::move(refusal.second));
  const std::uint64_t bytes = put.rows * put.cols * size_of(put.dtype);
  // A payload that does not fit is the client's bug, not a refusal: stop it early.
  if (put.offset > bytes || payload > bytes - put.offset)
    return fail(Status::malformed, fmt::format("put of {} bytes at offset {} overruns buffer {} of {} bytes", payload,
                                               put.offset, put.buffer, bytes));
  std::shared_ptr<Replica> replica = replica_for(put.buffer, put.dtype, put.rows, put.cols, "put", refusal);
  if (!replica) return refuse(refusal.first, std::move(refusal.second));

  if (payload == 0) return put_stored(put, replica, 0, {});
  if (!replica->host_only()) return put_staged(put, incoming, replica);
  std::weak_ptr<Session> weak = weak_from_this();
  // The replica is captured so that a free while the payload is arriving leaves the memory in place.
  incoming.into(replica->host + put.offset, [weak, put, payload, replica, start = std::chrono::steady_clock::now()](
                                                 const std::string& error) {
    auto self = weak.lock();
    if (!self) return;
    if (error.empty())
      self->server_.metrics.transfer(Metrics::Direction::in, payload,
                                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    self->put_stored(put, replica, payload, error);
  });
}

bool Session::shape_allowed(std::uint64_t id, protocol::DType dtype, std::uint64_t rows, std::uint64_t cols,
                            std::string_view request, std::pair<Status, std::string>& refusal) const {
  if (auto it = replicas_.find(id); it != replicas_.end()) {
    const auto& replica = it->second;
    if (replica->dtype != dtype || replica->rows != rows || replica->cols != cols) {
      refusal = {Status::bad_arguments, fmt::format("buffer {} is {}; a {} cannot change it to {}", id,
                                                    describe_shape(replica->dtype, replica->rows, replica->cols),
                                                    request, describe_shape(dtype, rows, cols))};
      return false;
    }
    return true;
  }
  const std::uint64_t elements = rows * cols;
  const bool overflows = cols != 0 && elements / cols != rows;
  if (overflows || elements > protocol::max_buffer_bytes / size_of(dtype) || elements == 0) {
    refusal = {Status::bad_arguments,
               fmt::format("buffer {}: a {} buffer cannot be made", id, describe_shape(dtype, rows, cols))};
    return false;
  }
  return true;
}

std::shared_ptr<Replica> Session::replica_for(std::uint64_t id, protocol::DType dtype, std::uint64_t rows,
                                              std::uint64_t cols, std::string_view request,
                                              std::pair<Status, std::string>& refusal) {
  if (!shape_allowed(id, dtype, rows, cols, request, refusal)) return nullptr;
  if (auto it = replicas_.find(id); it != replicas_.end()) return it->second;
  const std::uint64_t bytes = rows * cols * size_of(dtype);
  if (auto refused = admit(bytes, fmt::format("buffer {}", id), request)) {
    refusal = std::move(*refused);
    return nullptr;
  }
  auto replica = std::make_shared<Replica>();
  try {
    // Not zeroed: puts usually overwrite it whole, and zeroing first would
    // double the memory traffic. Whatever a put leaves unwritten is zeroed
    // before it is read (Replica::written), so another client's data that
    // the pool's memory held never shows.
    replica->buffer = server_.runtime.buffer(dtype, rows, cols, ferry::Runtime::Fill::none);
    // Taken once: the buffer is new, so no task uses it and this does not wait.
    replica->host = static_cast<std::byte*>(replica->buffer.host_data());
  } catch (const OutOfMemory& e) {
    refusal = {Status::out_of_memory, e.what()};
    return nullptr;
  } catch (const Error& e) {
    refusal = {Status::bad_arguments, e.what()};
    return nullptr;
  }
  replica->bytes = bytes;
  replica->dtype = dtype;
  replica->rows = rows;
  replica->cols = cols;
  replica->written = WrittenRanges(bytes);
  replicas_.emplace(id, replica);
  charge(bytes);
  return replica;
}

void Session::put_staged(const protocol::Put& put, transport::Incoming& incoming,
                         const std::shared_ptr<Replica>& replica) {
  const std::uint64_t payload = incoming.payload_bytes();
  // Counted against the quota while it waits, so a client cannot pile up
  // payloads outside it.
  if (auto refused = admit(payload, fmt::format("a put into buffer {}", put.buffer), "put"))
    return send(protocol::PutAck{put.request, put.buffer, refused->first, std::move(refused->second)});
  charge(payload);
  std::shared_ptr<std::byte[]> staged = std::make_shared_for_overwrite<std::byte[]>(payload);
  std::weak_ptr<Session> weak = weak_from_this();
  incoming.into(staged.get(), [weak, put, payload, replica, staged, start = std::chrono::steady_clock::now()](
                                  const std::string& error) {
    auto self = weak.lock();
    if (!self || self->state_ == State::closed) return;  // closing gave its memory back
    if (!error.empty()) {
      self->uncharge(payload);
      return self->put_stored(put, replica, payload, error);
    }
    self->server_.metrics.transfer(Metrics::Direction::in, payload,
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    auto land = [replica, staged, offset = put.offset, payload] {
      std::memcpy(replica->host + offset, staged.get(), payload);
    };
    self->with_host(replica, /*for_writing=*/true, std::move(land),
                    [self = self.get(), put, replica, payload](Status status, const std::string& why) {
                      self->uncharge(payload);
                      if (status != Status::ok)
                        return self->send(protocol::PutAck{put.request, put.buffer, status, clip(why)});
                      self->put_stored(put, replica, payload, {});
                    });
  });
}

void Session::with_host(const std::shared_ptr<Replica>& replica, bool for_writing, std::function<void()> there,
                        HostReady then) {
  // What the host catches up with: runs submitted after this do not count.
  const std::uint64_t uses = replica->gpu_uses, writes = replica->gpu_writes;
  std::weak_ptr<Session> weak = weak_from_this();
  std::weak_ptr<transport::Worker> worker = server_.worker;
  server_.background.post(share_key_, [weak, worker, replica, for_writing, uses, writes, there = std::move(there),
                                       then = std::move(then)]() mutable {
    Status status = Status::ok;
    std::string error;
    try {
      // The runtime's own host read or write (Buffer::host()): waits for
      // the tasks using the buffer, then copies what only the GPU holds
      // home; a write drops the GPU's copy. No view is held afterwards, so
      // no task ever waits for this thread.
      if (for_writing) (void)replica->buffer.host_data();
      else (void)replica->buffer.host_data_read();
      if (there) there();
    } catch (const KernelError& e) {
      status = Status::kernel_failed;  // a task that wrote it failed
      error = e.what();
    } catch (const std::exception& e) {
      status = Status::internal;
      error = fmt::format("bringing buffer data home from the GPU failed: {}", e.what());
    }
    if (auto w = worker.lock())
      w->post([weak, replica, for_writing, uses, writes, status, error = std::move(error),
               then = std::move(then)] {
        auto self = weak.lock();
        if (!self || self->state_ == State::closed) return;
        if (status == Status::ok) {
          replica->writes_home = std::max(replica->writes_home, writes);
          if (for_writing) replica->uses_home = std::max(replica->uses_home, uses);
        }
        then(status, error);
      });
  });
}

std::shared_ptr<Replica> Session::replica(std::uint64_t id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? nullptr : it->second;
}

// `replica` is the one the payload went to, which a free and a put of the
// same id since may have replaced: only its bytes count as written.
void Session::put_stored(const protocol::Put& put, const std::shared_ptr<Replica>& replica, std::uint64_t bytes,
                         const std::string& error) {
  if (state_ == State::closed) return;
  if (!error.empty()) {
    log().warn("client {}: receiving {} bytes for buffer {} failed: {}", describe(), bytes, put.buffer, error);
    return send(protocol::PutAck{put.request, put.buffer, Status::internal, "receiving the payload failed: " + error});
  }
  counters_.bytes_in += bytes;
  server_.metrics.bytes_in(bytes, share_key_);
  if (bytes > 0) {
    replica->spoiled.clear();
    replica->written.add(put.offset, bytes);
    if (replica->written.too_fragmented()) replica->written.zero_unwritten(replica->host);
  }
  send(protocol::PutAck{put.request, put.buffer, Status::ok, {}});
}

void Session::on_get(const protocol::Get& get) {
  auto it = replicas_.find(get.buffer);
  if (it == replicas_.end())
    return send(protocol::Data{get.request, get.buffer, get.offset, Status::unknown_buffer,
                               fmt::format("buffer {} is not held for this client", get.buffer)});
  std::shared_ptr<Replica> replica = it->second;
  if (get.offset > replica->bytes || get.length > replica->bytes - get.offset)
    return send(protocol::Data{get.request, get.buffer, get.offset, Status::bad_arguments,
                               fmt::format("bytes [{}, {}) lie outside buffer {} of {} bytes", get.offset,
                                           get.offset + get.length, get.buffer, replica->bytes)});
  send_data(get, replica);
}

void Session::send_data(const protocol::Get& get, const std::shared_ptr<Replica>& replica) {
  if (!replica->spoiled.empty() || replica->host_current()) return send_current(get, replica);
  // A GPU run wrote it since the host last had it: the bytes come home
  // first, once for every get of the buffer (the later ones find it there).
  with_host(replica, /*for_writing=*/false, nullptr, [this, get, replica](Status status, const std::string& why) {
    if (status != Status::ok)
      return send(protocol::Data{get.request, get.buffer, get.offset, status, clip(why)});
    send_current(get, replica);
  });
}

void Session::send_current(const protocol::Get& get, const std::shared_ptr<Replica>& replica) {
  if (!replica->spoiled.empty())
    return send(protocol::Data{get.request, get.buffer, get.offset, Status::kernel_failed, replica->spoiled});

  // Bytes no put or task wrote read as zeros, not as what the memory held before.
  replica->written.zero_unwritten(replica->host, get.offset, get.length);
  auto header = protocol::encode(protocol::Data{get.request, get.buffer, get.offset, Status::ok, {}});
  // Counted when sent, not when the send completes: a client that reads its
  // stats right after the data must see it counted.
  counters_.bytes_out += get.length;
  server_.metrics.bytes_out(get.length, share_key_);
  const std::string who = describe();
  connection_->send(std::move(header), replica->host + get.offset, get.length,
                    [replica, who, &metrics = server_.metrics, bytes = get.length,
                     start = std::chrono::steady_clock::now()](const std::string& error) {
                      if (!error.empty()) return log().debug("sending data to {} failed: {}", who, error);
                      metrics.transfer(Metrics::Direction::out, bytes,
                                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
                    });
}

void Session::on_free(const protocol::Free& free) {
  auto it = replicas_.find(free.buffer);
  if (it == replicas_.end()) {
    log().debug("client {} freed buffer {}, which it does not hold", describe(), free.buffer);
    return;
  }
  uncharge(it->second->bytes);
  server_.capabilities->drop_buffer(this, free.buffer);  // what it granted of it goes too
  // Tasks using it hold the runtime buffer; transfers hold the replica.
  replicas_.erase(it);
}

void Session::on_stats(const protocol::StatsRequest& request) {
  send(protocol::StatsReply{request.request, counters_.bytes_in, counters_.bytes_out, counters_.tasks,
                            replicas_.size(), memory_in_use_});
}

}  // namespace ferry::ferryd
