#include "keygen.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ferry/transport/identity.hpp"

namespace ferry::tools {

int run_keygen(const std::filesystem::path& path, std::string name) {
  if (name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const char* user = std::getenv("USER");
    name = fmt::format("{}@{}", user != nullptr ? user : "ferry", host);
  }
  if (name.find_first_of(" \t\r\n") != std::string::npos) {
    fmt::print(stderr, "ferry keygen: the name '{}' may not contain spaces\n", name);
    return 2;
  }
  const auto pair = transport::KeyPair::generate();
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  pair.write(path);
  const auto line = transport::public_key_line(pair.public_key(), name);
  const auto public_path = std::filesystem::path(path.string() + ".pub");
  std::ofstream(public_path) << line << '\n';
  fmt::print(stderr, "private key: {} (keep it secret: mode 600)\npublic key:  {}\nfingerprint: {}\n",
             path.string(), public_path.string(), transport::fingerprint(pair.public_key()));
  fmt::print("{}\n", line);
  return 0;
}

}  // namespace ferry::tools
