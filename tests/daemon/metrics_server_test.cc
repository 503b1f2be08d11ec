// MetricsServer: serves the Prometheus text format at /metrics on a port it
// picks, runs refreshers before a scrape, reports bind failures as statuses.
#include "common/daemon/metrics_server.h"

#include <string>

#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "tests/daemon/http_get.h"

namespace gift::daemon {
namespace {

using testing::HttpGet;
using testing::HttpRequest;

TEST(MetricsServerTest, ServesPrometheusTextOnAPickedPort) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->serving());
  const std::string address = (*server)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0");

  prometheus::Registry& r = *(*server)->registry();
  auto& pushes =
      prometheus::BuildCounter().Name("gift_test_pushes_total").Help("pushes").Register(r).Add({});
  auto& by_reason = prometheus::BuildCounter()
                        .Name("gift_test_rejected_messages_total")
                        .Help("rejected")
                        .Register(r);
  auto& epoch = prometheus::BuildGauge().Name("gift_test_epoch").Help("epoch").Register(r).Add({});
  prometheus::BuildHistogram()
      .Name("gift_test_reduce_seconds")
      .Help("reduce")
      .Register(r)
      .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.01, 0.1})
      .Observe(0.005);
  pushes.Increment(3);
  by_reason.Add({{"reason", "DATA_LOSS"}}).Increment();
  uint64_t polled = 41;
  (*server)->AddRefresher([&] { epoch.Set(static_cast<double>(++polled)); });

  const std::string page = HttpGet(address, "/metrics");
  ASSERT_NE(page.find("200 OK"), std::string::npos) << page;
  EXPECT_NE(page.find("# TYPE gift_test_pushes_total counter"), std::string::npos) << page;
  EXPECT_NE(page.find("\ngift_test_pushes_total 3"), std::string::npos) << page;
  EXPECT_NE(page.find("gift_test_rejected_messages_total{reason=\"DATA_LOSS\"} 1"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("# TYPE gift_test_epoch gauge"), std::string::npos) << page;
  EXPECT_NE(page.find("\ngift_test_epoch 42"), std::string::npos) << page;  // refreshed
  EXPECT_NE(page.find("# TYPE gift_test_reduce_seconds histogram"), std::string::npos) << page;
  EXPECT_NE(page.find("gift_test_reduce_seconds_bucket{le=\"0.01\"} 1"), std::string::npos) << page;
  ASSERT_NE(page.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << page;
  // Every sample line is NAME[{labels}] VALUE, and every name is ours.
  size_t samples = 0;
  const size_t body = page.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  size_t pos = body + 4;
  while (pos < page.size()) {
    size_t end = page.find('\n', pos);
    if (end == std::string::npos) end = page.size();
    const std::string line = page.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    ++samples;
    EXPECT_EQ(line.rfind("gift_test_", 0), 0u) << line;
    EXPECT_NE(line.rfind(' '), std::string::npos) << line;
  }
  EXPECT_GE(samples, 4u);
}

// Only GET and HEAD of /metrics are served; anything else gets a clear answer
// and the server keeps serving.
TEST(MetricsServerTest, AnswersOtherPathsAndMethodsWithoutThePage) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::BuildGauge().Name("gift_test_up").Help("up").Register(*(*server)->registry()).Add(
      {}).Set(1);
  const std::string address = (*server)->address();
  const std::string missing = HttpGet(address, "/");
  EXPECT_NE(missing.find(" 404 "), std::string::npos) << missing;
  EXPECT_EQ(missing.find("gift_test_up"), std::string::npos) << missing;
  const std::string posted = HttpRequest(address, "POST", "/metrics");
  EXPECT_NE(posted.find(" 405 "), std::string::npos) << posted;
  const std::string head = HttpRequest(address, "HEAD", "/metrics");
  EXPECT_NE(head.find("200 OK"), std::string::npos) << head;
  EXPECT_EQ(head.find("gift_test_up"), std::string::npos) << head;  // headers only
  EXPECT_NE(HttpGet(address, "/metrics").find("gift_test_up 1"), std::string::npos);
}

// The server's thread has the default stack: a scrape that needs far more
// stack than civetweb's 100 KiB threads had (less the process's static TLS)
// still works.
TEST(MetricsServerTest, ScrapesRunOnAThreadWithAFullSizedStack) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  auto& g =
      prometheus::BuildGauge().Name("gift_test_deep").Help("deep").Register(*(*server)->registry());
  g.Add({}).Set(0);
  (*server)->AddRefresher([&] {
    volatile char deep[512 * 1024];  // 512 KiB on the scraping thread's stack
    for (size_t i = 0; i < sizeof(deep); i += 4096) deep[i] = static_cast<char>(i);
    g.Add({}).Set(deep[4096]);
  });
  const std::string page = HttpGet((*server)->address(), "/metrics");
  EXPECT_NE(page.find("200 OK"), std::string::npos) << page;
  EXPECT_NE(page.find("gift_test_deep 0"), std::string::npos) << page;
}

TEST(MetricsServerTest, EmptyAddressDisablesServingButKeepsTheRegistry) {
  auto server = MetricsServer::Start("");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->serving());
  EXPECT_EQ((*server)->address(), "");
  auto& g =
      prometheus::BuildGauge().Name("gift_test_up").Help("up").Register(*(*server)->registry());
  g.Add({}).Set(1);
  EXPECT_NE((*server)->Render().find("gift_test_up 1"), std::string::npos);
}

TEST(MetricsServerTest, TakenPortIsUnavailable) {
  auto first = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsServer::Start((*first)->address());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(MetricsServerTest, MalformedAddressIsInvalid) {
  EXPECT_EQ(MetricsServer::Start("9470").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsServerTest, AdvanceCounterToNeverGoesBack) {
  prometheus::Registry r;
  auto& c = prometheus::BuildCounter().Name("gift_test_total").Help("t").Register(r).Add({});
  AdvanceCounterTo(c, 5);
  AdvanceCounterTo(c, 3);
  EXPECT_EQ(c.Value(), 5);
  AdvanceCounterTo(c, 8);
  EXPECT_EQ(c.Value(), 8);
}

}  // namespace
}  // namespace gift::daemon
