// nodes_test: node_id() and nodes() on one node: the same id in the driver, a
// task and an actor; one live node with the runtime's resources; a new id per init.
#include <unistd.h>

#include <string>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

std::string id_in_a_task() { return manta::node_id(); }
std::size_t nodes_seen_in_a_task() { return manta::nodes().size(); }
MANTA_REMOTE(id_in_a_task, nodes_seen_in_a_task);

struct Probe {
  std::string id() const { return manta::node_id(); }
};
MANTA_ACTOR(Probe, &Probe::id);

class nodes : public manta::testing::runtime_fixture {};

TEST_F(nodes, one_node_with_one_id_everywhere) {
  start(2, {.resources = {{"disk", 2}}});
  const std::string id = manta::node_id();
  EXPECT_EQ(id.size(), 8u);
  EXPECT_EQ(manta::get(manta::task(id_in_a_task).remote(), 10s), id);
  auto probe = manta::actor<Probe>().remote();
  EXPECT_EQ(manta::get(probe.task(&Probe::id).remote(), 10s), id);

  auto all = manta::nodes();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id, id);
  EXPECT_TRUE(all[0].alive);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(all[0].address, host);
  EXPECT_EQ(all[0].resources.at("CPU"), 2);
  EXPECT_EQ(all[0].resources.at("disk"), 2);
  EXPECT_EQ(all[0].resources, manta::cluster_resources());
  EXPECT_EQ(manta::get(manta::task(nodes_seen_in_a_task).remote(), 10s), 1u);
}

TEST(nodes_lifecycle, a_new_init_is_a_new_node_and_none_outside_a_runtime) {
  EXPECT_THROW(manta::node_id(), manta::usage_error);
  EXPECT_THROW(manta::nodes(), manta::usage_error);
  manta::init({.num_workers = 1});
  const std::string first = manta::node_id();
  manta::shutdown();
  EXPECT_THROW(manta::node_id(), manta::usage_error);
  manta::init({.num_workers = 1});
  EXPECT_NE(manta::node_id(), first);
  manta::shutdown();
}

}  // namespace
