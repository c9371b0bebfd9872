#include "common/net/local_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::net {
namespace {

using ::testing::HasSubstr;

TEST(LocalAddressTest, LoopbackPeerIsReachedFromLoopback) {
  auto a = LocalAddressTowards("127.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
  EXPECT_TRUE(IsLoopback(*a));
  auto named = LocalAddressTowards("localhost:1");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE(IsLoopback(*named)) << *named;
}

TEST(LocalAddressTest, BadPeersAreNamed) {
  auto none = LocalAddressTowards(":7070");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("names no host"));
  auto unknown = LocalAddressTowards("no-such-host.invalid:7070");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("cannot resolve no-such-host.invalid"));
}

TEST(LocalAddressTest, InterfaceOfAnAddress) {
  auto lo = InterfaceWithAddress("127.0.0.1");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "lo");
  // An address of the test-host range that no interface here has (nothing is sent).
  auto none = InterfaceWithAddress("198.19.255.254");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("no interface of this machine has the address 198.19.255.254"));
}

TEST(LocalAddressTest, Loopback) {
  EXPECT_TRUE(IsLoopback("127.0.0.1"));
  EXPECT_TRUE(IsLoopback("127.3.2.1"));
  EXPECT_TRUE(IsLoopback("::1"));
  EXPECT_FALSE(IsLoopback("198.18.0.2"));
  EXPECT_FALSE(IsLoopback("not an address"));
  EXPECT_TRUE(IsNumericAddress("198.18.0.2"));
  EXPECT_TRUE(IsNumericAddress("fe80::1"));
  EXPECT_FALSE(IsNumericAddress("node-1"));
}

}  // namespace
}  // namespace tessera::net
