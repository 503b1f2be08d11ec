// giftctl: see giftctl.h and `giftctl --help`.
#include <iostream>
#include <string>
#include <vector>

#include "tools/giftctl/giftctl.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  return gift::giftctl::Run(args, gift::giftctl::DefaultCoordinator(), std::cout, std::cerr);
}
