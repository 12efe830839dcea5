// bridge/tls.hpp: TLS on the bridge's connections (OpenSSL). A head given a
// certificate and key speaks TLS on every connection; a member does when told
// (MANTA_TLS_CA: the file of the authority that signed the head's
// certificate, which is then checked; or MANTA_TLS=1: encrypted, the head's
// certificate unchecked). The token's challenge-response runs inside TLS as
// before. Once start_tls succeeded on a socket, send_all and receive
// (bridge/socket_io) on it go through its session, from any thread.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "bridge/socket_io.hpp"
#include "bridge/wire.hpp"

struct ssl_ctx_st;
struct ssl_st;

namespace manta::bridge {

class tls_context {
 public:
  /// The head's: its certificate chain and private key (PEM files).
  /// @throws io_error naming the file that could not be used
  static std::shared_ptr<tls_context> for_head(const std::string& cert_file, const std::string& key_file);
  /// A member's: `ca_file` (PEM) signs the head's certificate, which must then
  /// name the address connected to; empty: the certificate is not checked.
  /// @throws io_error naming the file that could not be used
  static std::shared_ptr<tls_context> for_member(const std::string& ca_file);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  ssl_ctx_st* native() const noexcept { return ctx_; }
  bool checks_head() const noexcept { return checks_head_; }

 private:
  tls_context() = default;
  ssl_ctx_st* ctx_ = nullptr;
  bool checks_head_ = false;
};

/// A member's TLS from its environment (MANTA_TLS_CA; else MANTA_TLS_CERT,
/// the head's own certificate, as the ranks of a launch share it; else
/// MANTA_TLS=1), or null: plain TCP. @throws io_error if the file is unusable
std::shared_ptr<tls_context> member_tls_from_env();

/// Runs the TLS handshake on connected socket `fd` as the head (accepting) or
/// a member connecting to `host`. @throws io_error saying why it failed
void start_tls(int fd, const tls_context& ctx, bool as_head, const std::string& host, io_clock::time_point until);

/// 32 bytes of keying material exported from `fd`'s TLS session (RFC 5705),
/// the same on both ends of one session and no other; empty without TLS.
std::string tls_binding(int fd);

/// The same, from a session held by its owner (the head's Asio streams).
std::string tls_binding(ssl_st* session);

/// Closes `fd`, forgetting its TLS session first if it has one.
void close_socket(int fd) noexcept;

// For bridge/socket_io: the same as its functions, through `fd`'s session.
// Each returns false at once (doing nothing) when `fd` has none.
bool tls_send_all(int fd, std::span<const std::string_view> pieces, io_clock::time_point until,
                  io_clock::duration stall = {}, const heard_time* heard = nullptr);
bool tls_read_into(int fd, frame_decoder& in, io_clock::time_point until, int wake_fd, receive_status& status);

}  // namespace manta::bridge
