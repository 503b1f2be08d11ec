// AddPolledMetrics: counters and gauges registered at 0, one snapshot per
// scrape written into every row, rows of one name as one labelled family,
// counters that never go back, served on a real /metrics endpoint.
#include "common/daemon/polled_metrics.h"

#include <atomic>
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/http_get.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A component's counters, as its snapshot function returns them.
struct Counts {
  uint64_t pushes = 0, bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  int32_t epoch = 0;
};

struct Component {
  std::atomic<int> snapshots{0};
  Counts now;
  Counts Snapshot() {
    ++snapshots;
    return now;
  }
};

void AddComponentMetrics(MetricsServer& metrics, Component* c) {
  AddPolledMetrics<Counts>(metrics, [c] { return c->Snapshot(); },
                           {
                               {kCounter, "gift_test_pushes_total", "pushes", Field(&Counts::pushes)},
                               {kCounter, "gift_test_bytes_total", "bytes", Field(&Counts::bytes_in),
                                {{"direction", "in"}}},
                               {kCounter, "gift_test_bytes_total", "bytes",
                                Field(&Counts::bytes_out), {{"direction", "out"}}},
                               {kCounter, "gift_test_seconds_total", "seconds",
                                Field(&Counts::seconds)},
                               {kGauge, "gift_test_epoch", "epoch", Field(&Counts::epoch)},
                           });
}

TEST(PolledMetricsTest, RowsStartAtZeroAndFollowTheSnapshot) {
  auto metrics = MetricsServer::Start("");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  Component c;
  AddComponentMetrics(**metrics, &c);
  EXPECT_EQ(c.snapshots, 0);  // nothing polled before a scrape
  std::string page = (*metrics)->Render();
  EXPECT_EQ(c.snapshots, 1);  // one snapshot for every row
  EXPECT_THAT(page, HasSubstr("gift_test_pushes_total 0\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_epoch 0\n"));

  c.now = {.pushes = 7, .bytes_in = 1000, .bytes_out = 250, .seconds = 1.5, .epoch = 3};
  page = (*metrics)->Render();
  EXPECT_EQ(c.snapshots, 2);
  EXPECT_THAT(page, HasSubstr("gift_test_pushes_total 7\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_bytes_total{direction=\"in\"} 1000\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_bytes_total{direction=\"out\"} 250\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_seconds_total 1.5\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_epoch 3\n"));
  // Rows of one name are one family: one HELP and TYPE line.
  const std::string help = "# HELP gift_test_bytes_total bytes\n";
  const size_t first = page.find(help);
  ASSERT_NE(first, std::string::npos) << page;
  EXPECT_EQ(page.find(help, first + 1), std::string::npos) << page;
}

TEST(PolledMetricsTest, CountersNeverGoBackGaugesDo) {
  auto metrics = MetricsServer::Start("");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  Component c;
  AddComponentMetrics(**metrics, &c);
  c.now = {.pushes = 9, .epoch = 5};
  (*metrics)->Render();
  c.now = {.pushes = 2, .epoch = 1};  // a restarted source
  const std::string page = (*metrics)->Render();
  EXPECT_THAT(page, HasSubstr("gift_test_pushes_total 9\n"));
  EXPECT_THAT(page, HasSubstr("gift_test_epoch 1\n"));
}

TEST(PolledMetricsTest, AScrapeOverHttpSeesCurrentValues) {
  auto metrics = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  Component c;
  AddComponentMetrics(**metrics, &c);
  c.now.pushes = 41;
  const std::string page = testing::HttpGet((*metrics)->address(), "/metrics");
  EXPECT_THAT(page, HasSubstr("gift_test_pushes_total 41\n"));
  EXPECT_THAT(page, Not(HasSubstr("gift_test_pushes_total 0\n")));
}

}  // namespace
}  // namespace gift::daemon
