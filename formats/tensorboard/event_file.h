// TensorBoard event files, written by tessera's own code: the TFRecord framing (each record: its
// length as a little-endian uint64, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C
// of the data) around `Event` protocol buffers (encoded here by hand: wall_time, step, file_version,
// and a `Summary` of scalar values — tag and simple_value), as TensorBoard, W&B and MLflow read them.
// No torch.
//
// One file per run directory, under a fixed name (events.out.tfevents.0000000000.tessera), so that
// a job restarted from a checkpoint appends to the file it wrote before: EventFileWriter::Open first
// keeps only the events of steps up to the step the job resumes from (a new file renamed into place),
// so no step appears twice, whichever reader follows it.
#ifndef TESSERA_FORMATS_TENSORBOARD_EVENT_FILE_H_
#define TESSERA_FORMATS_TENSORBOARD_EVENT_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/userfs/user_files.h"

namespace tessera::formats::tensorboard {

inline constexpr char kEventFileName[] = "events.out.tfevents.0000000000.tessera";

// One TFRecord: the framing around `data`.
std::string FrameRecord(std::string_view data);
// The complete, checksummed records of `bytes` in order; stops at the first incomplete or damaged
// one (a run killed mid-write leaves at most its last record unfinished).
std::vector<std::string> ReadRecords(std::string_view bytes);

// Event{wall_time, file_version: "brain.Event:2"}: the first record of every event file.
std::string FileVersionEvent(double wall_time);
// Event{wall_time, step, summary: {value: [{tag, simple_value}...]}} (values as fp32, as TensorBoard's).
std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
// The step of an encoded Event (0 when it has none, as file_version events).
int64_t EventStep(std::string_view event);

class EventFileWriter {
 public:
  // Opens BASE/SUBDIR/kEventFileName for appending, creating SUBDIR. An existing file keeps only its
  // events of steps ≤ `keep_up_to_step` (its file_version first); a new file starts with a file_version
  // event. BASE is a job's OUTPUT_DIR, which its user controls: SUBDIR and the file are opened through
  // common/userfs (a symbolic link there is refused, never followed into another job's directory; a
  // FIFO is refused without waiting), and every later write goes to the directory opened here.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& base, const std::string& subdir,
                                                               int64_t keep_up_to_step);
  // Appends one event with `scalars` for `step` and flushes it to the file.
  absl::Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(userfs::UniqueFd dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  userfs::UniqueFd dir_;  // BASE/SUBDIR, held open.
  std::string path_;
};

}  // namespace tessera::formats::tensorboard

#endif  // TESSERA_FORMATS_TENSORBOARD_EVENT_FILE_H_
