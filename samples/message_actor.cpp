// message_actor: an actor as a mailbox. Three tasks, each given the actor's
// handle, push messages to it while the driver drains it; nothing is lost and
// each sender's messages arrive in the order it sent them.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <manta/manta.hpp>

class MessageActor {
 public:
  void add_message(std::string message) { messages_.push_back(std::move(message)); }
  std::vector<std::string> get_and_clear_messages() { return std::exchange(messages_, {}); }

 private:
  std::vector<std::string> messages_;
};
MANTA_ACTOR(MessageActor, &MessageActor::add_message, &MessageActor::get_and_clear_messages);

constexpr int per_sender = 100;

/// Sends `per_sender` messages to the mailbox; returns how many it sent.
int send_messages(manta::actor_handle<MessageActor> mailbox, int sender) {
  std::vector<manta::object_ref<void>> sent;
  for (int i = 0; i < per_sender; ++i)
    sent.push_back(mailbox.task(&MessageActor::add_message)
                       .remote("sender " + std::to_string(sender) + " message " + std::to_string(i)));
  manta::get(sent);
  return per_sender;
}
MANTA_REMOTE(send_messages);

int main() {
  manta::init({.num_workers = 3});
  auto mailbox = manta::actor<MessageActor>().remote();
  std::vector<manta::object_ref<int>> senders;
  for (int s = 0; s < 3; ++s) senders.push_back(manta::task(send_messages).remote(mailbox, s));

  // Drain while they send, until every message is in.
  std::map<int, int> next;  // sender -> the message number expected next
  int received = 0, drains = 0;
  bool in_order = true;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received < 3 * per_sender && std::chrono::steady_clock::now() < give_up) {
    auto batch = manta::get(mailbox.task(&MessageActor::get_and_clear_messages).remote());
    ++drains;
    for (const auto& m : batch) {
      int sender = 0, number = 0;
      std::sscanf(m.c_str(), "sender %d message %d", &sender, &number);
      in_order = in_order && number == next[sender]++;
      ++received;
    }
  }
  int sent = 0;
  for (int n : manta::get(senders)) sent += n;
  std::printf("3 senders sent %d messages; the driver received %d in %d drains\n", sent, received, drains);
  std::printf("each sender's messages arrived in order: %s\n", in_order ? "yes" : "no");
  manta::shutdown();
  return sent == received && in_order ? 0 : 1;
}
