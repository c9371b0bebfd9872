// The event file's framing and encoding against bytes derived by hand from the TFRecord and protocol
// buffer rules, and the trim at a resume. (Readability by TensorBoard's own reader:
// tests/python/tensorboard_test.py.)
#include "formats/tensorboard/event_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "gtest/gtest.h"

namespace tessera::formats::tensorboard {
namespace {

namespace fs = std::filesystem;

TEST(EventFileTest, ScalarEventEncodesStepTagAndFloat) {
  // wall_time 0: 09 (field 1, fixed64) + 8 zero bytes; step 300: 10 (field 2, varint) AC 02;
  // summary: 2A len, value: 0A len, tag: 0A 04 "loss", simple_value 1.5f: 15 00 00 C0 3F.
  const std::string e = ScalarsEvent(0, 300, {{"loss", 1.5}});
  const std::string want = std::string("\x09\0\0\0\0\0\0\0\0", 9) + "\x10\xac\x02" + "\x2a\x0d" + "\x0a\x0b" +
                           "\x0a\x04loss" + std::string("\x15\0\0\xc0\x3f", 5);
  EXPECT_EQ(e, want);
  EXPECT_EQ(EventStep(e), 300);
  EXPECT_EQ(EventStep(FileVersionEvent(12.5)), 0);
}

TEST(EventFileTest, RecordsRoundTripAndADamagedOrUnfinishedTailIsDropped) {
  const std::string a = FrameRecord("first"), b = FrameRecord("second");
  EXPECT_EQ(a.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(ReadRecords(a + b), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(ReadRecords(a + b.substr(0, b.size() - 1)), (std::vector<std::string>{"first"}));
  std::string damaged = a + b;
  damaged[a.size() + 13] ^= 1;  // A byte of "second".
  EXPECT_EQ(ReadRecords(damaged), (std::vector<std::string>{"first"}));
}

TEST(EventFileTest, OpenKeepsTheStepsUpToTheResumedOneAndAppends) {
  const std::string base = std::string(getenv("TEST_TMPDIR")), dir = base + "/tb";
  fs::remove_all(dir);
  {
    auto w = EventFileWriter::Open(base, "tb", 0);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int step = 1; step <= 6; ++step) ASSERT_TRUE((*w)->AddScalars(step, {{"loss", 1.0 / step}}).ok());
  }
  auto steps = [&] {
    std::ifstream in(dir + "/" + kEventFileName, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int64_t> out;
    for (const std::string& r : ReadRecords(bytes)) out.push_back(EventStep(r));
    return out;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  auto resumed = EventFileWriter::Open(base, "tb", 4);  // Resumed from step 4's checkpoint.
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(steps(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_TRUE((*resumed)->AddScalars(5, {{"loss", 0.2}}).ok());
  EXPECT_EQ(steps(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(fs::directory_iterator(dir)->path().filename().string(), kEventFileName);  // No temporary left.
}

// A tensorboard/ planted in OUTPUT_DIR as a link into another job's directory: refused, nothing written
// there. A FIFO in place of the event file: refused at once.
TEST(EventFileTest, ALinkOrFifoPlantedInTheOutputDirIsRefused) {
  const std::string base = std::string(getenv("TEST_TMPDIR")) + "/planted";
  fs::remove_all(base);
  fs::create_directories(base + "/job");
  fs::create_directories(base + "/other_job/tensorboard");
  fs::create_directory_symlink(base + "/other_job/tensorboard", base + "/job/tensorboard");
  auto w = EventFileWriter::Open(base + "/job", "tensorboard", 0);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("tensorboard: is a symbolic link"), std::string::npos) << w.status();
  EXPECT_TRUE(fs::is_empty(base + "/other_job/tensorboard"));
  fs::remove(base + "/job/tensorboard");
  fs::create_directories(base + "/job/tensorboard");
  ASSERT_EQ(mkfifo((base + "/job/tensorboard/" + kEventFileName).c_str(), 0644), 0);
  auto f = EventFileWriter::Open(base + "/job", "tensorboard", 0);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("is a FIFO"), std::string::npos) << f.status();
}

}  // namespace
}  // namespace tessera::formats::tensorboard
