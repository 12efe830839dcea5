// bridge/auth.cpp: the handshake, over a socket with poll and a deadline.
#include "bridge/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "bridge/socket_io.hpp"
#include "bridge/tls.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {
namespace {

constexpr std::size_t nonce_bytes = 32, proof_bytes = 32;

using clock_type = io_clock;

/// nonce_bytes random bytes, as the frames carry them.
std::string fresh_nonce() {
  std::string n(nonce_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    throw auth_error("manta bridge: no random bytes for a nonce");
  return n;
}

/// HMAC-SHA256(token, role | first | second | binding). `binding` is the TLS
/// session's exported keying material (empty on plain TCP): a proof made in
/// one TLS session is worthless in another, so a relay between two sessions
/// (a man in the middle who skipped no check but the certificate's) fails.
std::string proof(const std::string& token, std::string_view role, std::string_view first, std::string_view second,
                  const std::string& binding) {
  std::string message(role);
  message += first;
  message += second;
  message += binding;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &length) ||
      length != proof_bytes)
    throw auth_error("manta bridge: HMAC-SHA256 failed");
  return {reinterpret_cast<const char*>(out), length};
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void send_all(socket_ref peer, const std::string& bytes, clock_type::time_point until) {
  try {
    bridge::send_all(peer, bytes, until);
  } catch (const io_error& e) {
    throw auth_error(std::string("manta bridge: during the handshake: ") + e.what());
  }
}

/// The next frame, of at most max_handshake_body bytes, before `until`.
frame receive(socket_ref peer, frame_decoder& in, clock_type::time_point until) {
  frame f;
  receive_status st;
  try {
    st = bridge::receive(peer, in, until, f);
  } catch (const wire_error& e) {
    throw auth_error(std::string("manta bridge: a malformed handshake: ") + e.what());
  } catch (const io_error& e) {
    throw auth_error(std::string("manta bridge: during the handshake: ") + e.what());
  }
  // (A member speaking plain TCP to a head that speaks TLS sees either.)
  const char* tls_hint = " (a head started with --tls-cert is joined with MANTA_TLS_CA or MANTA_TLS=1)";
  if (st == receive_status::timeout) throw auth_error(std::string("manta bridge: the handshake timed out") + tls_hint);
  if (st != receive_status::frame)
    throw auth_error(std::string("manta bridge: the other side closed the connection during the handshake") + tls_hint +
                     "; a head under a flood of connections that never prove the token drops the oldest of them");
  return f;
}

}  // namespace

token_check::token_check(std::string token, std::string binding)
    : token_(std::move(token)), binding_(std::move(binding)), nonce_(fresh_nonce()) {}

std::string token_check::welcome(const frame& f) const {
  auto refuse = [](const std::string& why) { throw token_refused(why); };
  if (f.type != frame_type::proof || f.body.size() != nonce_bytes + proof_bytes)
    refuse("the first frame was not a proof of the cluster token");
  const std::string_view theirs = std::string_view(f.body).substr(0, nonce_bytes);
  if (!same_secret(std::string_view(f.body).substr(nonce_bytes), proof(token_, "peer", nonce_, theirs, binding_)))
    refuse(binding_.empty() ? "wrong cluster token" : "wrong cluster token, or a proof made in another TLS session");
  return proof(token_, "head", theirs, nonce_, binding_);
}

void authenticate_peer(socket_ref peer, const std::string& token, std::chrono::milliseconds timeout) {
  frame_decoder in;
  authenticate_peer(peer, token, in, timeout);
}

void authenticate_to_head(socket_ref peer, const std::string& token, std::chrono::milliseconds timeout) {
  frame_decoder in;
  authenticate_to_head(peer, token, in, timeout);
}

void authenticate_peer(socket_ref peer, const std::string& token, frame_decoder& in, std::chrono::milliseconds timeout) {
  const auto until = clock_type::now() + timeout;
  const token_check check(token, tls_binding(peer));
  send_all(peer, encode(frame_type::challenge, check.challenge()), until);
  in.set_limit(max_handshake_body);
  const frame f = receive(peer, in, until);
  std::string welcome;
  try {
    welcome = check.welcome(f);
  } catch (const token_refused& e) {
    try {
      send_all(peer, encode(frame_type::refused, e.refusal()), clock_type::now() + std::chrono::milliseconds(200));
    } catch (const auth_error&) {  // it is being dropped anyway
    }
    throw;
  }
  send_all(peer, encode(frame_type::welcome, welcome), until);
  in.set_limit(max_frame_body);
}

void authenticate_to_head(socket_ref peer, const std::string& token, frame_decoder& in, std::chrono::milliseconds timeout) {
  const auto until = clock_type::now() + timeout;
  const std::string binding = tls_binding(peer);
  in.set_limit(max_handshake_body);
  frame f = receive(peer, in, until);
  if (f.type != frame_type::challenge || f.body.size() != nonce_bytes)
    throw auth_error("manta bridge: the head did not open with a challenge");
  const std::string head = f.body;
  const std::string ours = fresh_nonce();
  std::string body = ours;
  body += proof(token, "peer", head, ours, binding);
  send_all(peer, encode(frame_type::proof, body), until);
  f = receive(peer, in, until);
  if (f.type == frame_type::refused) throw auth_error("manta bridge: the head refused this peer: " + f.body);
  if (f.type != frame_type::welcome || !same_secret(f.body, proof(token, "head", ours, head, binding)))
    throw auth_error("manta bridge: the head did not prove it knows the cluster token");
  in.set_limit(max_frame_body);
}

}  // namespace manta::bridge
