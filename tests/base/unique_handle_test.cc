// UniqueHandle: destroys exactly the handles it holds, once each, through
// put, reset, move and destruction; null handles are never destroyed.
#include "common/base/unique_handle.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gift {
namespace {

std::vector<int> destroyed;  // the handles Destroy saw, in order

int Destroy(int h) {
  destroyed.push_back(h);
  return 0;  // a status the owner ignores
}

using Handle = UniqueHandle<int, Destroy>;

int Create(int value, int* out) {
  *out = value;
  return 0;
}

TEST(UniqueHandle, DestroysWhatItHoldsOnceEach) {
  destroyed.clear();
  {
    Handle a;
    EXPECT_FALSE(a);
    Create(7, a.put());  // nothing held: nothing destroyed
    EXPECT_TRUE(a);
    EXPECT_EQ(a.get(), 7);
    Create(8, a.put());  // 7 destroyed first
    EXPECT_EQ(destroyed, std::vector<int>({7}));

    Handle b(std::move(a));  // ownership moves; nothing destroyed
    EXPECT_FALSE(a);
    EXPECT_EQ(b.get(), 8);
    Handle c;
    Create(9, c.put());
    c = std::move(b);  // 9 destroyed, 8 moves
    EXPECT_EQ(destroyed, std::vector<int>({7, 9}));
    EXPECT_EQ(c.get(), 8);
    c = std::move(c);  // self-move keeps it
    EXPECT_EQ(c.get(), 8);
    c.reset();
    c.reset();  // already none
    EXPECT_EQ(destroyed, std::vector<int>({7, 9, 8}));
    Create(10, c.put());
  }  // a and b hold nothing; c's 10 is destroyed
  EXPECT_EQ(destroyed, std::vector<int>({7, 9, 8, 10}));
}

}  // namespace
}  // namespace gift
