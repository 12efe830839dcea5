// bridge/tls.cpp: OpenSSL sessions over the bridge's non-blocking sockets.
// A session's reader and its writers are different threads (a link's thread,
// its senders and its beats): every call into the session holds its mutex,
// and waiting for the socket (poll) never does, so a reader waiting for bytes
// holds up no writer.
#include "bridge/tls.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace manta::bridge {
namespace {

/// OpenSSL's queued errors as text (and the queue emptied), or `fallback`.
std::string ssl_errors(const char* fallback) {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    out += (out.empty() ? "" : "; ") + std::string(text);
  }
  return out.empty() ? fallback : out;
}

/// Waits up to `timeout_ms` until `fd` is ready for what `ssl_error` (WANT_READ or WANT_WRITE) asks.
/// @returns false if the time ran out
bool wait_for(int fd, int ssl_error, int timeout_ms) {
  pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  for (;;) {
    int ready = ::poll(&p, 1, timeout_ms);
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) throw io_error(std::string("manta bridge: poll: ") + std::strerror(errno));
  }
}

}  // namespace

std::shared_ptr<tls_context> tls_context::for_head(const std::string& cert_file, const std::string& key_file) {
  std::shared_ptr<tls_context> c(new tls_context());
  c->ctx_ = SSL_CTX_new(TLS_server_method());
  if (!c->ctx_) throw io_error("manta bridge: TLS: " + ssl_errors("no context"));
  SSL_CTX_set_min_proto_version(c->ctx_, TLS1_2_VERSION);
  // A peer that closes is gone, not an attack; and no renegotiation: a write
  // that must read would wait while the session's reader takes the bytes.
  SSL_CTX_set_options(c->ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(c->ctx_, cert_file.c_str()) != 1)
    throw io_error("manta bridge: TLS: cannot use the certificate " + cert_file + ": " + ssl_errors("unreadable"));
  if (SSL_CTX_use_PrivateKey_file(c->ctx_, key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    throw io_error("manta bridge: TLS: cannot use the key " + key_file + ": " + ssl_errors("unreadable"));
  if (SSL_CTX_check_private_key(c->ctx_) != 1)
    throw io_error("manta bridge: TLS: the key " + key_file + " is not the certificate's: " + ssl_errors("mismatch"));
  return c;
}

std::shared_ptr<tls_context> tls_context::for_member(const std::string& ca_file) {
  std::shared_ptr<tls_context> c(new tls_context());
  c->ctx_ = SSL_CTX_new(TLS_client_method());
  if (!c->ctx_) throw io_error("manta bridge: TLS: " + ssl_errors("no context"));
  SSL_CTX_set_min_proto_version(c->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(c->ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  if (!ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(c->ctx_, ca_file.c_str(), nullptr) != 1)
      throw io_error("manta bridge: TLS: cannot use the authority " + ca_file + ": " + ssl_errors("unreadable"));
    SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER, nullptr);
    c->checks_head_ = true;
  }
  return c;
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

std::shared_ptr<tls_context> member_tls_from_env() {
  if (const char* ca = std::getenv("MANTA_TLS_CA"); ca && *ca) return tls_context::for_member(ca);
  // The ranks of a launch share the head's certificate: they trust it (self-signed, its own authority).
  if (const char* cert = std::getenv("MANTA_TLS_CERT"); cert && *cert) return tls_context::for_member(cert);
  if (const char* on = std::getenv("MANTA_TLS"); on && std::strcmp(on, "1") == 0) return tls_context::for_member("");
  return nullptr;
}

tls_session::~tls_session() { SSL_free(ssl_); }

std::unique_ptr<tls_session> start_tls(int fd, const tls_context& ctx, bool as_head, const std::string& host,
                                       io_clock::time_point until) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx.native());
  if (!ssl) throw io_error("manta bridge: TLS: " + ssl_errors("no session"));
  auto s = std::make_unique<tls_session>(ssl);
  if (SSL_set_fd(ssl, fd) != 1) throw io_error("manta bridge: TLS: " + ssl_errors("no session"));
  if (!as_head && ctx.checks_head()) {
    // The head's certificate must name what was connected to: an address, or a host name.
    in6_addr any;
    const bool address = ::inet_pton(AF_INET, host.c_str(), &any) == 1 || ::inet_pton(AF_INET6, host.c_str(), &any) == 1;
    const int named = address ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str())
                              : SSL_set1_host(ssl, host.c_str());
    if (named != 1) throw io_error("manta bridge: TLS: cannot check the head's certificate for " + host);
  }
  if (!as_head && !host.empty()) SSL_set_tlsext_host_name(ssl, host.c_str());
  for (;;) {
    ERR_clear_error();
    const int r = as_head ? SSL_accept(ssl) : SSL_connect(ssl);
    if (r == 1) break;
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!wait_for(fd, e, left_ms(until))) throw io_error("manta bridge: the TLS handshake timed out");
      continue;
    }
    const bool closed = e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN;
    std::string why = ssl_errors(closed ? "the other side closed the connection"
                                 : as_head ? "the peer speaks no TLS"
                                           : "the head speaks no TLS");
    const bool rejected = !as_head && ctx.checks_head() && SSL_get_verify_result(ssl) != X509_V_OK;
    if (rejected)
      why = std::string("the head's certificate: ") + X509_verify_cert_error_string(SSL_get_verify_result(ssl));
    const bool hint = !as_head && !rejected && e == SSL_ERROR_SSL;
    throw io_error("manta bridge: the TLS handshake with " + (host.empty() ? std::string("a peer") : host) +
                   " failed (" + why + ")" + (hint ? "; was the head started with --tls-cert?" : ""));
  }
  return s;
}

std::string tls_binding(socket_ref s) {
  if (!s.tls) return {};
  std::lock_guard lock(s.tls->mutex());
  return tls_binding(s.tls->native());
}

std::string tls_binding(SSL* ssl) {
  static constexpr char label[] = "EXPORTER-manta-cluster-token";
  unsigned char out[32];
  if (SSL_export_keying_material(ssl, out, sizeof out, label, sizeof label - 1, nullptr, 0, 0) != 1)
    throw io_error("manta bridge: TLS: no keying material to bind the token to: " + ssl_errors("export failed"));
  return {reinterpret_cast<const char*>(out), sizeof out};
}

void tls_send_all(tls_session& session, int fd, std::span<const std::string_view> pieces, io_clock::time_point until,
                  io_clock::duration stall, const heard_time* heard) {
  // Small pieces (a batch of frames) go as one record, not one each.
  std::string joined;
  std::span<const std::string_view> what = pieces;
  std::string_view one;
  if (std::size_t total = 0; pieces.size() > 1) {
    for (std::string_view p : pieces) total += p.size();
    if (total <= (64u << 10)) {
      joined.reserve(total);
      for (std::string_view p : pieces) joined += p;
      one = joined;
      what = std::span<const std::string_view>(&one, 1);
    }
  }
  for (std::string_view piece : what) {
    for (std::size_t at = 0; at < piece.size();) {
      // The same length again after a WANT_*: OpenSSL requires the retry to match.
      const int chunk = static_cast<int>(std::min<std::size_t>(piece.size() - at, 1u << 20));
      int n, e = 0;
      {
        std::lock_guard lock(session.mutex());
        ERR_clear_error();
        n = SSL_write(session.native(), piece.data() + at, chunk);
        if (n <= 0) e = SSL_get_error(session.native(), n);
      }
      if (n > 0) {
        at += static_cast<std::size_t>(n);
        if (stall.count() > 0) until = std::max(until, io_clock::now() + stall);  // it moves: more time
        continue;
      }
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!wait_for(fd, e, send_wait_ms(until, heard)) && send_ran_out(until, stall, heard))
          throw send_timeout();
        continue;
      }
      throw io_error("manta bridge: the TLS connection broke: " + ssl_errors(std::strerror(errno)));
    }
  }
}

receive_status tls_read_into(tls_session& session, int fd, frame_decoder& in, io_clock::time_point until, int wake_fd) {
  for (;;) {
    if (wake_fd >= 0) {  // asked to stop: before reading on, as the plain path does
      pollfd w{wake_fd, POLLIN, 0};
      if (::poll(&w, 1, 0) > 0) return receive_status::woken;
    }
    // Read first, wait after: the session may hold bytes the socket no longer shows.
    std::span<char> room = in.space(in.wanted());
    int n, e = 0;
    {
      std::lock_guard lock(session.mutex());
      ERR_clear_error();
      n = SSL_read(session.native(), room.data(), static_cast<int>(std::min<std::size_t>(room.size(), INT_MAX)));
      if (n <= 0) e = SSL_get_error(session.native(), n);
    }
    if (n > 0) {
      in.commit(static_cast<std::size_t>(n));
      return receive_status::frame;
    }
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && (errno == 0 || errno == ECONNRESET || errno == EPIPE))) {
      ERR_clear_error();
      return receive_status::closed;
    }
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      throw io_error("manta bridge: the TLS connection broke: " + ssl_errors(std::strerror(errno)));
    pollfd p[2] = {{fd, static_cast<short>(e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0}, {wake_fd, POLLIN, 0}};
    const int ready = ::poll(p, wake_fd >= 0 ? 2 : 1, left_ms(until));
    if (ready == 0) return receive_status::timeout;
    if (ready < 0 && errno != EINTR) throw io_error(std::string("manta bridge: poll: ") + std::strerror(errno));
    if (ready > 0 && wake_fd >= 0 && p[1].revents) return receive_status::woken;
  }
}

}  // namespace manta::bridge
