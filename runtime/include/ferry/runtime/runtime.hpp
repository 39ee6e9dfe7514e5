// The runtime: buffers, tasks, devices and the scheduler behind them.
//
//   ferry::Runtime rt;
//   auto x = rt.buffer<float>(n);
//   auto y = rt.buffer<float>(n);
//   std::ranges::fill(x.host(), 1.0f);
//   rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.0);
//   double s = rt.submit("dot", ferry::read(y), ferry::read(y)).result();
//   rt.wait();
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/allocator/memory_resource.hpp"
#include "ferry/runtime/auto_chunk.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/runtime/perf_model.hpp"
#include "ferry/runtime/scheduler.hpp"
#include "ferry/runtime/submission.hpp"
#include "ferry/runtime/task.hpp"
#include "ferry/runtime/trace.hpp"
#include "ferry/runtime/user_kernel.hpp"

namespace ferry {

namespace detail {
class RuntimeCore;
// How a new buffer starts: zeroed or left as the allocator gave it, in host
// memory or in unified (managed) memory.
struct BufferFlags {
  bool zero = true;
  bool unified = false;
};
}

struct DeviceInfo {
  DeviceId id = 0;
  std::string name;
  DeviceKind kind = DeviceKind::cpu;
  MemoryNodeId node = host_node;
  unsigned lanes = 0;         // CPU workers, or GPU streams
  std::size_t tasks_run = 0;
  std::size_t queued = 0;     // tasks assigned to it and not finished
  std::string perf_key;       // which performance models apply to it (ferry models)
  // Its peak rates per task: the first estimates before any run (measured:
  // from a device probe).
  DevicePeak peak;
  // Bytes copied into and out of its memory node (GPUs and remotes; 0 for the CPU).
  std::size_t bytes_in = 0, bytes_out = 0;
  // GPUs: tasks enqueued behind their predecessor on its stream, before it
  // finished, instead of waiting for its completion (a chain on one GPU).
  std::size_t stream_ordered = 0;
  // GPUs: bytes copied in from another local GPU directly (not in bytes_in,
  // which counts what came from host memory).
  std::size_t bytes_from_peers = 0;
  // For people: a GPU's model and memory, a remote's state ("down: why").
  std::string description;
  int gpu = -1;  // a local GPU's CUDA ordinal; -1 for other devices
  // False while it takes no tasks: a remote that is down, or a GPU after a
  // CUDA error that leaves it unusable until the process restarts (a sticky
  // error: an illegal address, a launch failure). Its tasks run elsewhere,
  // or fail naming it when nothing else can run them.
  bool available = true;
  std::string down_reason;  // why not, when known; empty while available
};

// What a runtime does when a remote GPU host cannot be used.
//   require: construction throws RemoteError, naming the host and why, unless
//            every remote answers and authenticates within remote_timeout.
//   prefer:  the runtime starts anyway; each unusable host is warned about
//            once, its tasks run here, and it is retried in the background.
// Under both, a refusal that retrying cannot fix (a wrong token, an address
// that is not [ucx://]host:port, a protocol mismatch) is never retried, and a
// host lost after it was reached is retried and failed over, never fatal.
enum class RemotePolicy { require, prefer };

class Runtime {
 public:
  struct Options {
    // CPU worker threads; 0: one per CPU the process may use.  FERRY_WORKERS
    unsigned workers = 0;
    Policy policy = Policy::heft;                                // FERRY_POLICY
    // Record a trace; written as Chrome trace JSON to trace_path at shutdown
    // when set, with a summary logged.                          FERRY_TRACE=path
    bool trace = false;
    std::filesystem::path trace_path;
    // Log every placement decision with its candidates.         FERRY_EXPLAIN=1
    bool explain = false;
    // Performance models load from and save to this folder.    FERRY_PERFMODEL_DIR
    // Empty: PerfModels::default_dir(). persist=false keeps them in memory only.
    std::filesystem::path perf_model_dir;
    bool persist_perf_models = true;                             // FERRY_PERFMODELS=off
    std::uint64_t seed = 1;                                      // the random policy
    // Where host replicas live; default: a PinnedPool of this runtime.
    std::shared_ptr<MemoryResource> host_memory;
    // GPU hosts running ferryd, as "host:port" or "ucx://host:port", or
    // "dns:NAME:PORT": every address NAME resolves to, re-resolved every
    // discovery_interval so hosts join and leave the pool with the name.
    // FERRY_REMOTES=a,b   FERRY_DISCOVERY_INTERVAL=seconds
    std::vector<std::string> remotes;
    std::chrono::milliseconds discovery_interval{30000};
    // How a dns: entry's name becomes addresses (numeric IPs); empty:
    // getaddrinfo. For resolvers other than the system's.
    std::function<std::vector<std::string>(const std::string& name)> resolve;
    // Listen on "host:port" (port 0: any, see Runtime::listen_port) for GPU
    // hosts that cannot accept connections and dial out instead (ferryd
    // --connect). Each is authenticated as a dialled one is (with keys, its
    // host key must be listed in known_hosts) and joins the pool.   FERRY_LISTEN
    std::string listen;
    // The pre-shared token ferryd expects: inline, or the file holding it.  FERRY_TOKEN, FERRY_TOKEN_FILE
    std::string token;
    std::filesystem::path token_file;
    // Sign in with this private key (ferry keygen) instead of the token.  FERRY_IDENTITY
    std::filesystem::path identity;
    // Pins of ferryd host keys, trusted on first use ("strict": pinned
    // beforehand only). Empty: ~/.config/ferry/known_hosts when signing in
    // with a key; none with the token (which ferryd proves it knows).
    // FERRY_KNOWN_HOSTS, FERRY_STRICT_HOST_KEYS=1
    std::filesystem::path known_hosts;
    bool strict_host_keys = false;
    // Links to ferryd are encrypted, except on loopback; encrypt_loopback
    // seals those too, plaintext lets a ferryd started with --plaintext
    // skip encryption (trusted networks only).   FERRY_ENCRYPT_LOOPBACK=1, FERRY_PLAINTEXT=1
    bool encrypt_loopback = false;
    bool plaintext = false;
    RemotePolicy remote_policy = RemotePolicy::require;           // FERRY_REMOTE_POLICY=require|prefer
    std::chrono::milliseconds remote_timeout{10000};              // FERRY_REMOTE_TIMEOUT=seconds
    // A connected host not heard from this long while tasks or transfers
    // wait on it is lost as if its connection had failed (its work placed
    // again, its data recomputed) and dialled afresh: a stopped or hung
    // ferryd, or one behind a partition, keeps its TCP connection open and
    // would otherwise hold those tasks for good. A ping goes out after half
    // of it. Too short, and a host merely slow to answer is dropped and its
    // work redone. 0: off.                                        FERRY_REMOTE_LIVENESS=seconds
    std::chrono::milliseconds remote_liveness{5000};
    // How long NVRTC may take to compile a CUDA source kernel when it is
    // defined (cuda_kernel, add_kernel), for all of this runtime's GPUs;
    // the definition fails with a CompileError past it.   FERRY_COMPILE_LIMIT=seconds
    std::chrono::milliseconds compile_limit = default_compile_limit;
    // Transfers above this are split and pipelined, this many chunks in flight.  FERRY_CHUNK_BYTES, FERRY_CHUNK_WINDOW
    std::size_t chunk_bytes = std::size_t{4} << 20;
    unsigned chunk_window = 4;
    // Data that only remote host A holds, needed on remote host B, moves
    // from A to B directly (the runtime grants B a capability on A), not
    // through this process. Off: it comes here and goes out again.  FERRY_HOST_TO_HOST=0
    bool host_to_host = true;
    // Local GPUs: "all", "none" or ordinals like "0,1". An ordinal this host
    // lacks is a UsageError; without a driver, "all" means none.   FERRY_GPUS
    std::string gpus = "all";
    // Bytes of each GPU that replicas may take; 0: its free memory at start
    // less a safety margin.                                       FERRY_GPU_MEMORY
    std::size_t gpu_memory_limit = 0;
    // Compute streams per GPU: tasks that may run on it side by side.  FERRY_GPU_STREAMS
    unsigned gpu_streams = 2;
    // A task placed on the CPU alone, ready when submitted, whose calibrated
    // estimate there is below this, runs on the submitting thread instead of
    // being handed to a worker and back (ferryd: on its progress thread,
    // which answers the run at once). 0: never.
    double inline_below_seconds = 0;
    // Split a large task of a chunkable kernel (elementwise, row-wise) placed
    // on a remote or a GPU into pieces whose transfers and kernels overlap,
    // when the measured link and perf model say it pays.   FERRY_AUTO_CHUNK=0
    bool auto_chunk = true;
    // How small a piece may be and how much the pipeline must gain before a
    // task is split (auto_chunk.hpp). The defaults suit every link measured.
    ChunkPolicy chunk_policy{};
    // FERRY_* variables override the fields above unless this is false.
    bool read_environment = true;
  };

  // Sets the fields of `o` that decide how links to ferryd are made and
  // trusted from the FERRY_* variables that are set: token, token file,
  // identity, known hosts, strict host keys, encrypt loopback, plaintext.
  // The runtime applies them (with the rest) when read_environment is true;
  // `ferry check` applies these alone, so that it trusts a host exactly
  // when a program would. Throws UsageError naming a malformed value.
  static void read_link_environment(Options& o);

  Runtime();
  explicit Runtime(Options options);
  // Waits for every submitted task, then saves models and writes the trace.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  template <typename T>
  Buffer<T> buffer(std::size_t n) {
    return Buffer<T>(make_buffer(dtype_of<T>(), 1, n));
  }
  template <typename T>
  Buffer<T> buffer(std::size_t rows, std::size_t cols) {
    return Buffer<T>(make_buffer(dtype_of<T>(), rows, cols));
  }
  // A buffer whose element type is chosen at run time. Fill::none skips
  // zeroing, for contents about to be overwritten whole (like numpy.empty).
  enum class Fill { zeros, none };
  AnyBuffer buffer(DType dtype, std::size_t rows, std::size_t cols, Fill fill = Fill::zeros) {
    return AnyBuffer(make_buffer(dtype, rows, cols, {.zero = fill == Fill::zeros}));
  }
  // Unified buffers: CUDA managed memory that a local GPU uses in place
  // (pages are prefetched to the GPU a task runs on instead of copied; host
  // use brings them back). Capped below the GPU's free memory. Without a
  // local GPU they are ordinary host buffers (a debug log line says so).
  template <typename T>
  Buffer<T> unified(std::size_t n) {
    return Buffer<T>(make_buffer(dtype_of<T>(), 1, n, {.unified = true}));
  }
  template <typename T>
  Buffer<T> unified(std::size_t rows, std::size_t cols) {
    return Buffer<T>(make_buffer(dtype_of<T>(), rows, cols, {.unified = true}));
  }
  AnyBuffer unified(DType dtype, std::size_t rows, std::size_t cols, Fill fill = Fill::zeros) {
    return AnyBuffer(make_buffer(dtype, rows, cols, {.zero = fill == Fill::zeros, .unified = true}));
  }
  // A 1-D buffer holding a copy of `values`.
  template <typename T>
  Buffer<T> buffer(std::span<const T> values) {
    Buffer<T> b(make_buffer(dtype_of<T>(), 1, values.size()));
    std::copy(values.begin(), values.end(), b.host().data());
    return b;
  }

  // Submits a task in program order; its dependencies on earlier tasks are
  // inferred from the buffer accesses. Bad arguments throw UsageError here,
  // before anything runs, naming the task, the kernel and the argument.
  template <typename... A>
  Task submit(std::string_view kernel, A&&... args) {
    return submit_named(kernel, detail::make_submission(std::forward<A>(args)...));
  }
  template <typename... A>
  Task submit(const KernelRef& kernel, A&&... args) {
    return submit_def(kernel.def, detail::make_submission(std::forward<A>(args)...));
  }

  // The same, with arguments assembled at run time (servers, bindings).
  Task submit_args(std::string_view kernel, std::vector<TaskArg> args, Place place = {}, std::string name = {}) {
    detail::Submission s{std::move(args), std::move(place), std::move(name)};
    return submit_named(kernel, std::move(s));
  }
  Task submit_args(const KernelRef& kernel, std::vector<TaskArg> args, Place place = {}, std::string name = {}) {
    detail::Submission s{std::move(args), std::move(place), std::move(name)};
    return submit_def(kernel.def, std::move(s));
  }

  // Makes a fresh whole buffer hold `buffer.bytes()` bytes that live at
  // `device_ptr` on local GPU `gpu` (contiguous, the buffer's element type and
  // layout): copied device to device into the buffer's replica on that GPU,
  // with no host trip. The copy follows the work enqueued on the legacy
  // default stream (DLPack's stream 1); data from another stream must be
  // ready there first. Throws UsageError without such a GPU, for a view, or
  // for a buffer tasks already use.
  void import_device_data(const BufferBase& buffer, int gpu, const void* device_ptr);

  // Waits for every task submitted so far. Rethrows (as KernelError) the
  // first failure since the last wait().
  void wait();
  // The same, giving up after `timeout`: false if tasks are still running
  // (nothing is rethrown then). Lets bindings stay interruptible.
  bool wait_for(std::chrono::nanoseconds timeout);

  // Registers a kernel with this runtime (found before the global registry).
  // One from CUDA source (make_cuda_source_kernel) is compiled now, as cuda_kernel says.
  KernelRef add_kernel(KernelDef def);
  template <typename F>
  KernelRef kernel(std::string name, F callable, std::function<Cost(const KernelArgs&)> cost = {}) {
    return add_kernel(make_kernel(std::move(name), std::move(callable), std::move(cost)));
  }
  // Registers a kernel written as CUDA C++ source (ferry/runtime/cuda_source.hpp),
  // named after `entry`. Throws UsageError naming what cannot be parsed, and
  // CompileError when NVRTC, compiling it here for this runtime's GPUs, finds
  // an error or passes Options::compile_limit. A runtime without GPUs (or a
  // build without CUDA) compiles nothing: it can still run the kernel on a
  // remote GPU host, which compiles it there.
  KernelRef cuda_kernel(std::string source, std::string entry, std::vector<std::string> writes = {},
                        std::vector<std::string> options = {});
  // Looks a kernel up by name: this runtime's first, then the global registry.
  KernelRef find_kernel(std::string_view name) const;
  bool has_kernel(std::string_view name) const;
  // Every kernel this runtime can run: its own, built-ins and plugins.
  std::vector<std::string> kernel_names() const;
  // Loads a shared library whose FERRY_KERNEL registrations add kernels to
  // the global registry. Throws Error naming the file and dlerror's reason.
  void load_plugin(const std::filesystem::path& path);

  std::vector<DeviceInfo> devices() const;
  // The pool while the program runs. add_remote takes what Options::remotes
  // takes ("host:port", "ucx://host:port", "dns:NAME:PORT"); a host added is
  // used by tasks submitted from then on (under RemotePolicy::require, one
  // that cannot be used throws RemoteError naming it). remove_remote drains
  // the host and returns once it is out: nothing new is placed there, its
  // queued tasks move to the CPU, tasks running there finish, and data only
  // it holds comes home first. An address not (or already) in the pool is a
  // UsageError. A removed host stays listed in devices(), "down: removed
  // from the pool", and rejoins when added again. A host that dialled in
  // (Options::listen) goes by its name without "remote:" (its host key's
  // fingerprint); once removed, its calls are closed until add_remote
  // names it again.
  void add_remote(const std::string& address);
  void remove_remote(const std::string& address);
  // The port Options::listen bound (useful with port 0); 0 when not listening.
  std::uint16_t listen_port() const;
  // What a remote's ferryd counted for this client, and what this runtime
  // moved to and from it. Throws UsageError for an unknown address,
  // RemoteError when the remote cannot answer.
  struct RemoteStats {
    std::uint64_t server_bytes_in = 0, server_bytes_out = 0, server_tasks = 0, server_replicas = 0;
    std::uint64_t server_memory_in_use = 0;
    std::size_t bytes_shipped = 0, bytes_fetched = 0;
    // Bytes this host pulled from other hosts directly (host-to-host): they
    // did not pass through this runtime and are in neither count above.
    std::size_t bytes_from_hosts = 0;
    bool connected = false;
    // What the host said when it last welcomed us (empty before that).
    std::string server;                 // "ferryd <version>"
    std::vector<std::string> kernels;   // the kernels it runs
    std::vector<std::string> server_devices;
    std::uint64_t quota = 0;
    // The link as measured at connect and refined by transfers.
    double latency_seconds = 0, bytes_per_second = 0;
    std::string down_reason;  // why it is not connected, when it is not
    // What seals the link ("XChaCha20-Poly1305", "AES-256-GCM"), or
    // "plaintext" (loopback, FERRY_PLAINTEXT); empty before it connected.
    std::string cipher;
    std::uint64_t tasks_forwarded = 0;  // sent behind their predecessors, before they were ready
    // Copies whose data was brought home to cut their lineage (once every
    // few thousand writes there), so a long chain's memory stays bounded.
    std::uint64_t lineage_checkpoints = 0;
  };
  RemoteStats remote_stats(const std::string& address) const;
  // Work this runtime did again because a device was lost, since it began:
  // tasks placed again elsewhere (what ran on the lost host was lost with it)
  // and lineage replays (data only the lost host held, recomputed on the
  // host). Seconds are the runs' own durations, added up.
  struct Recovery {
    std::uint64_t tasks_placed_again = 0;
    double placed_again_seconds = 0;
    std::uint64_t lineage_replays = 0;
    double replay_seconds = 0;
  };
  Recovery recovery() const noexcept;
  const Options& options() const noexcept;
  // Where host replicas live (the runtime's pinned pool unless Options chose).
  std::shared_ptr<MemoryResource> host_memory() const noexcept;
  PerfModels& perf_models();
  // The trace so far; null unless tracing.
  const Trace* trace() const noexcept;
  // The trace's figures, and the trace as Chrome trace JSON. Both need
  // tracing (Options::trace or FERRY_TRACE=path): without it they throw
  // UsageError saying so.
  TraceSummary summary() const;
  void write_trace(const std::filesystem::path& path) const;
  std::string describe() const;

 private:
  friend class Graph;  // validates once through the core and submits many times

  std::shared_ptr<detail::BufferState> make_buffer(DType dtype, std::size_t rows, std::size_t cols,
                                                   detail::BufferFlags flags = {});
  Task submit_named(std::string_view kernel, detail::Submission submission);
  Task submit_def(const std::shared_ptr<const KernelDef>& kernel, detail::Submission submission);

  std::shared_ptr<detail::RuntimeCore> core_;
};

}  // namespace ferry
