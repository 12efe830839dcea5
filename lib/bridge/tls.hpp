// bridge/tls.hpp: TLS on the bridge's connections (OpenSSL). A head given a
// certificate and key speaks TLS on every connection; a member does when told
// (MANTA_TLS_CA: the file of the authority that signed the head's
// certificate, which is then checked; or MANTA_TLS=1: encrypted, the head's
// certificate unchecked). The token's challenge-response runs inside TLS as
// before. start_tls hands the connection's owner its session: send_all and
// receive (bridge/socket_io) given it go through it, from any thread. (The
// head's sessions use Boost.Asio's ssl::stream over the same context.)
#pragma once

#include <memory>
#include <mutex>
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

/// One connection's TLS session, held by the connection's owner, who closes
/// the socket only after the session is no longer used. Its reader and its
/// writers may be different threads: every call into OpenSSL holds its mutex,
/// and waiting for the socket never does.
class tls_session {
 public:
  explicit tls_session(ssl_st* ssl) noexcept : ssl_(ssl) {}
  ~tls_session();
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;
  ssl_st* native() const noexcept { return ssl_; }
  std::mutex& mutex() noexcept { return mu_; }

 private:
  ssl_st* ssl_;
  std::mutex mu_;
};

/// Runs the TLS handshake on connected socket `fd` as the head (accepting) or
/// a member connecting to `host`. @returns the session, for every later send
/// and receive on `fd` @throws io_error saying why it failed
std::unique_ptr<tls_session> start_tls(int fd, const tls_context& ctx, bool as_head, const std::string& host,
                                       io_clock::time_point until);

/// 32 bytes of keying material exported from the connection's TLS session (RFC
/// 5705), the same on both ends of one session and no other; empty without TLS.
std::string tls_binding(socket_ref s);
/// The same, from an OpenSSL session (the head's Asio streams).
std::string tls_binding(ssl_st* session);

// For bridge/socket_io: the same as its functions, through `session`.
void tls_send_all(tls_session& session, int fd, std::span<const std::string_view> pieces, io_clock::time_point until,
                  io_clock::duration stall = {}, const heard_time* heard = nullptr);
receive_status tls_read_into(tls_session& session, int fd, frame_decoder& in, io_clock::time_point until, int wake_fd);

}  // namespace manta::bridge
