// bridge/token.hpp: the cluster token: 32 random bytes, written as hex to a
// file only its user may read (0600), and read back only from such a file.
#pragma once

#include <stdexcept>
#include <string>

namespace manta::bridge {

class token_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A fresh token: 32 random bytes as 64 hex digits.
std::string new_token();

/// Writes `token` to `path` (created 0600; an existing file is replaced,
/// never written through a link). @throws token_error naming the path and why
void write_token_file(const std::string& path, const std::string& token);

/// A fresh token written to `path`. @returns the token.
std::string make_token_file(const std::string& path);

/// The token in `path`. @throws token_error if the file is missing, is not a
/// regular file of this user, may be read by others, or holds no token.
std::string read_token_file(const std::string& path);

/// Where a member finds the token when no file is named: MANTA_TOKEN_FILE, else
/// `<log_dir>/cluster.token`.
std::string default_token_file(const std::string& log_dir);

}  // namespace manta::bridge
