// cors: the list flags (JSON or comma lists), the origin check, and the headers of preflights and
// actual responses (wildcards, credentials, methods and headers outside the allowed lists).
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "server/cors.h"

namespace fuselm::server {
namespace server_cors_test {

std::map<std::string, std::string> as_map(const HeaderList& h) { return {h.begin(), h.end()}; }

TEST(Cors, ListFlagsTakeJsonOrCommaLists) {
  EXPECT_EQ(parse_list_flag("--x", R"(["http://a", "http://b"])"), (std::vector<std::string>{"http://a", "http://b"}));
  EXPECT_EQ(parse_list_flag("--x", "http://a, http://b,,"), (std::vector<std::string>{"http://a", "http://b"}));
  EXPECT_EQ(parse_list_flag("--x", "*"), (std::vector<std::string>{"*"}));
  EXPECT_TRUE(parse_list_flag("--x", "").empty());
  EXPECT_THROW(parse_list_flag("--x", "[1, 2]"), std::runtime_error);
  EXPECT_THROW(parse_list_flag("--x", "[oops"), std::runtime_error);
}

TEST(Cors, OffByDefault) {
  CorsConfig c;
  EXPECT_FALSE(c.enabled());
  EXPECT_TRUE(cors_response_headers(c, "http://a").empty());
  EXPECT_TRUE(cors_preflight_headers(c, "http://a", "POST", "").empty());
}

TEST(Cors, ExactOriginIsEchoedWithVary) {
  CorsConfig c;
  c.allowed_origins = {"http://a"};
  auto h = as_map(cors_response_headers(c, "http://a"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "http://a");
  EXPECT_EQ(h["Vary"], "Origin");
  EXPECT_TRUE(cors_response_headers(c, "http://b").empty());
  EXPECT_TRUE(cors_response_headers(c, "").empty());
  auto p = as_map(cors_preflight_headers(c, "http://a", "POST", "authorization, content-type"));
  EXPECT_EQ(p["Access-Control-Allow-Origin"], "http://a");
  EXPECT_EQ(p["Access-Control-Allow-Methods"], "GET, POST, OPTIONS");
  EXPECT_EQ(p["Access-Control-Allow-Headers"], "authorization, content-type");
  EXPECT_EQ(p.count("Access-Control-Allow-Credentials"), 0u);
  EXPECT_TRUE(cors_preflight_headers(c, "http://b", "POST", "").empty());
}

TEST(Cors, WildcardIsStarUnlessCredentials) {
  CorsConfig c;
  c.allowed_origins = {"*"};
  EXPECT_EQ(as_map(cors_response_headers(c, "http://z"))["Access-Control-Allow-Origin"], "*");
  c.allow_credentials = true;
  auto h = as_map(cors_response_headers(c, "http://z"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "http://z");  // "*" with credentials is refused by browsers
  EXPECT_EQ(h["Access-Control-Allow-Credentials"], "true");
}

TEST(Cors, MethodsAndHeadersOutsideTheListsFailThePreflight) {
  CorsConfig c;
  c.allowed_origins = {"http://a"};
  c.allowed_methods = {"POST"};
  c.allowed_headers = {"Content-Type", "Authorization"};
  EXPECT_FALSE(cors_preflight_headers(c, "http://a", "post", "content-type").empty());
  EXPECT_TRUE(cors_preflight_headers(c, "http://a", "DELETE", "").empty());
  EXPECT_TRUE(cors_preflight_headers(c, "http://a", "POST", "content-type, x-secret").empty());
  EXPECT_EQ(as_map(cors_preflight_headers(c, "http://a", "POST", ""))["Access-Control-Allow-Headers"], "Content-Type, Authorization");
}

}  // namespace server_cors_test
}  // namespace fuselm::server
