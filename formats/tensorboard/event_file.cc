#include "formats/tensorboard/event_file.h"

#include <stdio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/crc32c.h"

namespace tessera::formats::tensorboard {
namespace {

namespace fs = std::filesystem;

// TFRecord's masked CRC-32C: rotated right by 15 bits plus a constant.
uint32_t MaskedCrc(const void* data, size_t n) {
  const uint32_t crc = checkpoint::Crc32c(0, data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void PutFixed32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint64_t GetFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
// Protocol buffer fields: (number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void PutTag(std::string* out, int field, int wire) { PutVarint(out, static_cast<uint64_t>(field) << 3 | wire); }
void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}
void PutDouble(std::string* out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutTag(out, field, 1);
  PutFixed64(out, bits);
}
void PutFloat(std::string* out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutTag(out, field, 5);
  PutFixed32(out, bits);
}

// Event (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64),
// file_version = 3 (string), summary = 5 (Summary). Summary: value = 1 (repeated Value).
// Summary.Value: tag = 1 (string), simple_value = 2 (float).
enum : int { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kValue = 1, kTag = 1, kSimpleValue = 2 };

bool ReadVarint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in->front());
    in->remove_prefix(1);
    *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string FrameRecord(std::string_view data) {
  std::string out;
  std::string length;
  PutFixed64(&length, data.size());
  out += length;
  PutFixed32(&out, MaskedCrc(length.data(), length.size()));
  out.append(data);
  PutFixed32(&out, MaskedCrc(data.data(), data.size()));
  return out;
}

std::vector<std::string> ReadRecords(std::string_view bytes) {
  std::vector<std::string> records;
  while (bytes.size() >= 12) {
    const uint64_t n = GetFixed64(bytes.data());
    if (GetFixed32(bytes.data() + 8) != MaskedCrc(bytes.data(), 8)) break;
    if (n > bytes.size() - 12 || bytes.size() - 12 - n < 4) break;  // Unfinished.
    const std::string_view data = bytes.substr(12, n);
    if (GetFixed32(bytes.data() + 12 + n) != MaskedCrc(data.data(), data.size())) break;
    records.emplace_back(data);
    bytes.remove_prefix(12 + n + 4);
  }
  return records;
}

std::string FileVersionEvent(double wall_time) {
  std::string e;
  PutDouble(&e, kWallTime, wall_time);
  PutBytes(&e, kFileVersion, "brain.Event:2");
  return e;
}

std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(&v, kTag, tag);
    PutFloat(&v, kSimpleValue, static_cast<float>(value));
    PutBytes(&summary, kValue, v);
  }
  std::string e;
  PutDouble(&e, kWallTime, wall_time);
  PutTag(&e, kStep, 0);
  PutVarint(&e, static_cast<uint64_t>(step));
  PutBytes(&e, kSummary, summary);
  return e;
}

int64_t EventStep(std::string_view event) {
  while (!event.empty()) {
    uint64_t key;
    if (!ReadVarint(&event, &key)) return 0;
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    uint64_t v = 0;
    switch (wire) {
      case 0:
        if (!ReadVarint(&event, &v)) return 0;
        if (field == kStep) return static_cast<int64_t>(v);
        break;
      case 1:
        if (event.size() < 8) return 0;
        event.remove_prefix(8);
        break;
      case 2:
        if (!ReadVarint(&event, &v) || v > event.size()) return 0;
        event.remove_prefix(v);
        break;
      case 5:
        if (event.size() < 4) return 0;
        event.remove_prefix(4);
        break;
      default:
        return 0;
    }
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& base,
                                                                       const std::string& subdir,
                                                                       int64_t keep_up_to_step) {
  auto dir = userfs::OpenDirUnder(base, subdir, /*create_dirs=*/true);
  if (!dir.ok()) return dir.status();
  const std::string shown = absl::StrCat(base, "/", subdir);
  const std::string path = absl::StrCat(shown, "/", kEventFileName);
  std::string kept;
  if (auto old = userfs::OpenAt(dir->get(), kEventFileName, userfs::Access::kRead, path); old.ok()) {
    auto size = userfs::FileSize(old->get());
    if (!size.ok()) return size.status();
    auto bytes = userfs::ReadAt(old->get(), 0, *size);
    if (!bytes.ok()) return absl::UnavailableError(absl::StrCat(path, ": ", bytes.status().message()));
    for (const std::string& record : ReadRecords(*bytes)) {
      if (EventStep(record) <= keep_up_to_step) kept += FrameRecord(record);
    }
  } else if (!absl::IsNotFound(old.status())) {
    return old.status();
  }
  if (kept.empty()) kept = FrameRecord(FileVersionEvent(Now()));
  // A new file renamed into place (never truncated in place): a crash leaves the old one or the new.
  const std::string tmp_name = absl::StrCat(kEventFileName, ".tmp");
  {
    auto tmp = userfs::OpenAt(dir->get(), tmp_name, userfs::Access::kWrite, path + ".tmp");
    if (!tmp.ok()) return tmp.status();
    if (absl::Status w = userfs::WriteAll(tmp->get(), kept); !w.ok()) {
      return absl::UnavailableError(absl::StrCat(path, ".tmp: ", w.message()));
    }
  }
  if (renameat(dir->get(), tmp_name.c_str(), dir->get(), kEventFileName) != 0) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot rename the temporary file into place: ", strerror(errno)));
  }
  return std::unique_ptr<EventFileWriter>(new EventFileWriter(*std::move(dir), path));
}

absl::Status EventFileWriter::AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  const std::string record = FrameRecord(ScalarsEvent(Now(), step, scalars));
  auto out = userfs::OpenAt(dir_.get(), kEventFileName, userfs::Access::kAppend, path_);
  if (!out.ok()) return out.status();
  if (absl::Status w = userfs::WriteAll(out->get(), record); !w.ok()) {
    return absl::UnavailableError(absl::StrCat(path_, ": ", w.message()));
  }
  return absl::OkStatus();
}

}  // namespace tessera::formats::tensorboard
