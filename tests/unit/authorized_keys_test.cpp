// ferryd's --authorized-keys file (tools/ferryd/authorized_keys.*): a file
// that does not say what its writer meant is refused whole, naming the
// file, the line and the culprit.
#include "authorized_keys.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ferry/error.hpp"
#include "ferry/transport/identity.hpp"

namespace ferry::ferryd {
namespace {

class AuthorizedKeysFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "ferry-keys-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A file of a comment and `line` (with `key` in it), as an operator writes it.
  std::filesystem::path write(const std::string& line) {
    const auto path = dir_ / "authorized_keys";
    std::ofstream(path, std::ios::trunc) << "# keys\n" << line << '\n';
    return path;
  }
  std::string key_words() const { return transport::public_key_line(key_.public_key(), ""); }
  // Why loading `path` was refused; fails the test when it loaded.
  std::string refusal(const std::filesystem::path& path) {
    try {
      const auto keys = AuthorizedKeys::load(path);
      ADD_FAILURE() << path << " loaded (" << keys.size() << " keys) instead of being refused";
    } catch (const UsageError& e) {
      return e.what();
    }
    return {};
  }

  std::filesystem::path dir_;
  transport::KeyPair key_ = transport::KeyPair::generate();
};

TEST_F(AuthorizedKeysFile, ANamedKeyWithOptionsLoads) {
  const auto keys = AuthorizedKeys::load(write(key_words() + " alice quota=1MiB source-kernels=no weight=3"));
  ASSERT_EQ(keys.size(), 1u);
  const Grant* grant = keys.find(key_.public_key());
  ASSERT_NE(grant, nullptr);
  EXPECT_EQ(grant->name, "alice");
  EXPECT_EQ(grant->quota, std::uint64_t{1} << 20);
  EXPECT_FALSE(grant->source_kernels);
  EXPECT_EQ(grant->weight, 3u);
}

// Without a name the first option would become the name, and the option
// would silently not apply: a key meant to have no source kernels would
// have them, a key meant to have a small quota the default one.
TEST_F(AuthorizedKeysFile, AnOptionWhereTheNameBelongsIsRefused) {
  for (const std::string option : {"quota=1MiB", "source-kernels=no", "weight=2"}) {
    const auto path = write(key_words() + " " + option);
    const auto why = refusal(path);
    EXPECT_NE(why.find(path.string() + ":2"), std::string::npos) << "names the file and line: " << why;
    EXPECT_NE(why.find("'" + option + "'"), std::string::npos) << "names the culprit: " << why;
    EXPECT_NE(why.find("no name"), std::string::npos) << why;
  }
}

TEST_F(AuthorizedKeysFile, ADirectoryIsRefused) {
  const auto why = refusal(dir_);
  EXPECT_NE(why.find(dir_.string()), std::string::npos) << why;
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
}

TEST_F(AuthorizedKeysFile, AMissingFileIsRefused) {
  const auto why = refusal(dir_ / "absent");
  EXPECT_NE(why.find("absent"), std::string::npos) << why;
}

}  // namespace
}  // namespace ferry::ferryd
