// tessera: the command-line client. `tessera run SPEC` trains locally; `tessera data prepare` makes
// token files; the cluster commands talk to the coordinator; `tessera export` and `tessera generate`
// read models. Never links LibTorch (generate runs the tessera-generate binary, score tessera-score).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/certs_command.h"
#include "client/chat_prepare.h"
#include "client/preference_prepare.h"
#include "client/prompt_prepare.h"
#include "client/chat_render.h"
#include "client/cluster_commands.h"
#include "client/data_prepare.h"
#include "client/data_samples.h"
#include "client/exit_codes.h"
#include "client/local_launcher.h"
#include "client/model_commands.h"
#include "client/plan_command.h"
#include "common/process/find_binary.h"

namespace tessera::client {
namespace {

// Replaces this process with the engine program `name` (generate/: it links LibTorch, this one never
// does) given argv[2..]; returns the exit code only when it cannot run.
int ExecEngineProgram(const std::string& name, const std::string& env, int argc, char** argv) {
  std::string bin = process::FindTesseraBinary(name, "generate", env.c_str());
  if (bin.empty()) {
    std::cerr << "error: " << name << " is not installed next to tessera (set " << env << ")\n";
    return kExitBadInput;
  }
  std::vector<char*> args{bin.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(bin.c_str(), args.data());
  std::cerr << "error: cannot run " << bin << ": " << std::strerror(errno) << "\n";
  return kExitBadInput;
}

int Main(int argc, char** argv) {
  // `tessera generate` is the tessera-generate binary, or tessera-generate-cuda for --device
  // cuda[:N]; `tessera score` is tessera-score. Their own --help lists their options.
  if (argc >= 2 && std::string(argv[1]) == "generate") {
    bool cuda = false;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      const std::string value = a == "--device" && i + 1 < argc ? argv[i + 1] : a.rfind("--device=", 0) == 0 ? a.substr(9) : "";
      if (value.rfind("cuda", 0) == 0) cuda = true;
    }
    return cuda ? ExecEngineProgram("tessera-generate-cuda", "TESSERA_GENERATE_CUDA_BINARY", argc, argv)
                : ExecEngineProgram("tessera-generate", "TESSERA_GENERATE_BINARY", argc, argv);
  }
  if (argc >= 2 && std::string(argv[1]) == "score") {
    return ExecEngineProgram("tessera-score", "TESSERA_SCORE_BINARY", argc, argv);
  }
  CLI::App app{"tessera: distributed training of transformer models"};
  app.require_subcommand(1);

  LaunchOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Train a job spec locally: one process per rank on this machine");
  run_cmd->add_option("spec", run.spec_path, "Job spec (YAML)")->required();
  run_cmd->add_option("--set", run.overrides, "Override a spec field: --set train.steps=20 (repeatable)");
  run_cmd->add_option("--threads-per-rank", run.threads_per_rank, "Intra-op threads per rank (default: cores / ranks)");
  run_cmd->add_option("--dump-at-step", run.dump_at_step,
                      "Debug: write full weights and gradients after step N to OUTPUT_DIR/debug/");
  run_cmd->add_flag("--quiet", run.quiet, "No progress output");
  run_cmd->add_option("--devices", run.devices, "With parallel: auto: how many rank processes to plan for");

  ClusterOptions cluster;
  if (const char* env = getenv("TESSERA_COORDINATOR"); env != nullptr && *env) cluster.coordinator = env;
  std::string output = "table";
  app.add_option("--coordinator", cluster.coordinator, "Coordinator address (default $TESSERA_COORDINATOR or 127.0.0.1:7070)");
  app.add_option("--output", output, "table or json")->check(CLI::IsMember({"table", "json"}));
  rpc::TlsFiles tls_files;
  for (auto [env, field] : {std::pair<const char*, std::string*>{"TESSERA_TLS_CA", &tls_files.ca},
                            {"TESSERA_TLS_CERT", &tls_files.cert},
                            {"TESSERA_TLS_KEY", &tls_files.key}}) {
    if (const char* v = getenv(env); v != nullptr && *v) *field = v;
  }
  bool insecure = false;
  app.add_option("--tls-ca", tls_files.ca, "The cluster's CA certificate (default $TESSERA_TLS_CA)");
  app.add_option("--tls-cert", tls_files.cert, "Your certificate, DIR/user-NAME.pem (default $TESSERA_TLS_CERT)");
  app.add_option("--tls-key", tls_files.key, "Its key, DIR/user-NAME.key (default $TESSERA_TLS_KEY)");
  app.add_flag("--insecure", insecure, "Talk to a coordinator on a non-loopback address without TLS");

  CertsOptions certs;
  std::string certs_show_path;
  CLI::App* certs_cmd = app.add_subcommand("certs", "The cluster's CA and certificates for mutual TLS");
  certs_cmd->require_subcommand(1);
  CLI::App* certs_init = certs_cmd->add_subcommand(
      "init", "A new CA in DIR, the coordinator's certificate and one for each --worker and --user");
  CLI::App* certs_issue = certs_cmd->add_subcommand("issue", "More certificates from the CA in DIR");
  CLI::App* certs_show = certs_cmd->add_subcommand("show", "The identity a certificate carries");
  certs_show->add_option("file", certs_show_path, "A certificate (.pem)")->required();
  for (CLI::App* c : {certs_init, certs_issue}) {
    c->add_option("dir", certs.dir, "Certificate directory (created with mode 0700)")->required();
    c->add_option("--worker", certs.workers, "A worker's node name (repeatable)");
    c->add_option("--user", certs.users, "A user's name (repeatable)");
    c->add_option("--san", certs.sans, "Another host name or IP address of the coordinator (repeatable)");
    c->add_option("--days", certs.days, "Validity of the certificates in days (default 365)")->check(CLI::Range(1, 3650));
  }
  certs_issue->add_flag("--coordinator", certs.coordinator, "The coordinator's certificate");

  std::string submit_spec;
  std::vector<std::string> submit_sets;
  bool follow = false;
  int max_restarts = 0;
  CLI::App* submit = app.add_subcommand("submit", "Submit a job spec to the coordinator");
  submit->add_option("spec", submit_spec, "Job spec (YAML)")->required();
  submit->add_option("--set", submit_sets, "Override a spec field (repeatable)");
  submit->add_option("--max-restarts", max_restarts, "Restarts from the newest checkpoint after a failure");
  submit->add_flag("--follow", follow, "Show progress until the job ends; exit 0 only if it SUCCEEDED");
  submit->add_option("--timeout", cluster.follow_timeout_s,
                     "With --follow: stop following after this many seconds (exit 4; the job goes on)")
      ->check(CLI::NonNegativeNumber);
  CLI::App* jobs = app.add_subcommand("jobs", "List jobs");
  std::string job_id;
  CLI::App* job = app.add_subcommand("job", "Show one job");
  job->add_option("id", job_id, "Job id")->required();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job (its ranks are stopped)");
  cancel->add_option("id", job_id, "Job id")->required();
  CLI::App* follow_cmd = app.add_subcommand("follow", "Follow a job until it ends");
  follow_cmd->add_option("id", job_id, "Job id")->required();
  follow_cmd->add_option("--timeout", cluster.follow_timeout_s,
                         "Stop following after this many seconds (exit 4; the job goes on)")
      ->check(CLI::NonNegativeNumber);
  CLI::App* workers = app.add_subcommand("workers", "List workers");
  std::string release_key;
  workers->add_option("--release-key", release_key,
                      "Admins: release worker NAME from the certificate key its name is bound to (after replacing "
                      "its certificate and key); its next registration binds the key it presents");
  CLI::App* plan = app.add_subcommand(
      "plan", "With --devices N: rank every parallel layout of the spec's model on N devices (cost model, local). "
              "Without: the mesh and placement the coordinator would choose now");
  plan->add_option("spec", submit_spec, "Job spec (YAML)")->required();
  plan->add_option("--set", submit_sets, "Override a spec field (repeatable)");
  LocalPlanOptions local_plan;
  plan->add_option("--devices", local_plan.devices, "Plan for N devices (local cost model)");
  plan->add_option("--gflops", local_plan.gflops, "Achieved GFLOP/s per device (default by spec device)");
  plan->add_option("--bandwidth-gbs", local_plan.bandwidth_gbs, "Collective bandwidth per device, GB/s");
  plan->add_option("--memory-gb", local_plan.memory_gb, "Memory per device, GB");
  plan->add_option("--top", local_plan.top, "Print only the first N layouts");
  app.add_subcommand("generate", "Sample tokens from a checkpoint or a transformers model (tessera generate --help)");
  app.add_subcommand("score", "A reward model's scores of preference pairs or single completions (tessera score --help)");
  ExportOptions export_options;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint as a transformers model directory (config.json + safetensors)");
  export_cmd->add_option("checkpoint", export_options.checkpoint,
                         "A checkpoint (step_NNNNNNNN) or a checkpoint directory (its newest)")->required();
  export_cmd->add_option("out_dir", export_options.out_dir, "New (or empty) output directory")->required();
  export_cmd->add_option("--dtype", export_options.dtype, "fp32 (default) or bf16");
  export_cmd->add_option("--pad-token-id", export_options.pad_token_id,
                         "A reward model's pad_token_id in config.json (default: null); transformers scores a "
                         "sequence at its last token that is not this id");
  export_cmd->add_option("--max-shard-size", export_options.max_shard_size,
                         "Largest file before sharding with an index, e.g. 5GB (default), 500MB");
  export_cmd->add_flag("--merge", export_options.merge,
                       "A LoRA checkpoint: write its base with the adapters merged in (a transformers model) "
                       "instead of a PEFT adapter directory");
  export_cmd->add_option("--base", export_options.base,
                         "With --merge: the base model (transformers directory or safetensors file); default: "
                         "the one the checkpoint's trainer_state.json names");
  int log_rank = 0;
  bool log_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a rank's log");
  logs->add_option("id", job_id, "Job id")->required();
  logs->add_option("--rank", log_rank, "Rank (default 0)");
  logs->add_flag("--follow", log_follow, "Keep printing until the job ends");
  logs->add_option("--timeout", cluster.follow_timeout_s,
                   "With --follow: stop after this many seconds (exit 4; the job goes on)")
      ->check(CLI::NonNegativeNumber);

  CLI::App* data_cmd = app.add_subcommand("data", "Prepare training data");
  data_cmd->require_subcommand(1);
  std::vector<std::string> prepare_paths;
  PrepareOptions prepare_options;
  CLI::App* prepare = data_cmd->add_subcommand(
      "prepare",
      "INPUT OUT.bin: byte-level tokens (uint16, vocab 256); with --tokenizer, INPUT... OUT_PREFIX: a Megatron "
      "indexed dataset OUT_PREFIX.bin + OUT_PREFIX.idx");
  prepare->add_option("paths", prepare_paths,
                      "Inputs, then the output. An input is a .jsonl file (one document per line), - (JSON lines "
                      "on stdin) or any other file (one document)")
      ->required()
      ->expected(2, -1);
  prepare->add_option("--tokenizer", prepare_options.tokenizer,
                      "A transformers tokenizer.json (byte-level BPE), or with --chat its directory");
  bool prepare_chat = false;
  prepare->add_flag("--chat", prepare_chat,
                    "INPUT... are conversations ({\"messages\": [...]} or {\"prompt\", \"completion\"} per line): "
                    "write an SFT dataset rendered with the tokenizer's chat template (docs/fine-tuning.md)");
  bool prepare_preference = false;
  prepare->add_flag("--preference", prepare_preference,
                    "INPUT... are preference pairs ({\"prompt\", \"chosen\", \"rejected\"} per line, messages or "
                    "text): write a preference dataset tokenized as TRL's DPOTrainer does (docs/post-training.md)")
      ->excludes("--chat");
  bool prepare_prompts = false;
  prepare->add_flag("--prompts", prepare_prompts,
                    "INPUT... are prompts for reinforcement learning ({\"prompt\": messages or text, ...fields} per "
                    "line): write a prompt dataset tokenized as TRL's GRPOTrainer does, the other fields kept")
      ->excludes("--chat")
      ->excludes("--preference");
  prepare->add_flag("--append-eos", prepare_options.append_eos, "End every document with the EOS token");
  prepare->add_option("--eos-token", prepare_options.eos_token,
                      "The EOS token's text (default: tokenizer_config.json's eos_token beside the tokenizer)");
  prepare->add_option("--text-key", prepare_options.text_key, "The JSON field that holds a document's text")
      ->default_val("text");
  prepare->add_option("--threads", prepare_options.threads, "Encoding threads (default: one per core)")
      ->check(CLI::Range(1, 1024));
  bool no_progress = false;
  prepare->add_flag("--no-progress", no_progress, "No progress line on stderr");
  std::string tokenize_tokenizer, tokenize_key = "text";
  std::vector<std::string> tokenize_texts, tokenize_inputs;
  std::string samples_spec;
  std::vector<std::string> samples_sets;
  int64_t samples_from = 0, samples_count = 8;
  CLI::App* samples = data_cmd->add_subcommand(
      "samples", "Print what a job spec's data gives, sample by sample (source, window, tokens), as JSON lines");
  samples->add_option("spec", samples_spec, "Job spec (YAML)")->required();
  samples->add_option("--set", samples_sets, "Override a spec field: key=value (repeatable)");
  samples->add_option("--from", samples_from, "First global sample (default 0)");
  samples->add_option("--count", samples_count, "How many samples (default 8)");
  CLI::App* tokenize = data_cmd->add_subcommand("tokenize", "Print the token ids of texts, one JSON list per document");
  tokenize->add_option("--tokenizer", tokenize_tokenizer, "A transformers tokenizer.json (byte-level BPE)")->required();
  tokenize->add_option("--text", tokenize_texts, "A text to encode (repeatable)");
  tokenize->add_option("inputs", tokenize_inputs, "Documents, as for data prepare");
  tokenize->add_option("--text-key", tokenize_key, "The JSON field that holds a document's text")->default_val("text");
  std::string chat_tokenizer;
  std::vector<std::string> chat_inputs;
  bool chat_generation_prompt = false;
  CLI::App* render_chat = data_cmd->add_subcommand(
      "render-chat", "Print the text a tokenizer's chat template makes of each conversation, as JSON lines");
  render_chat->add_option("--tokenizer", chat_tokenizer,
                          "A tokenizer directory (chat_template.jinja or tokenizer_config.json), or its tokenizer.json")
      ->required();
  render_chat->add_option("inputs", chat_inputs, "Conversations: .jsonl files of {\"messages\": [...]} (- for stdin)")
      ->required();
  render_chat->add_flag("--add-generation-prompt", chat_generation_prompt,
                        "End with the prompt for the assistant's next turn");
  bool tokenize_pieces = false, tokenize_special = false;
  tokenize->add_flag("--pieces", tokenize_pieces,
                     "Print the pre-tokenizer's pieces (byte-level alphabet) instead of the ids");
  tokenize->add_flag("--special", tokenize_special,
                     "Match special tokens spelled in the text (as transformers' tokenizer(text) does; a rendered "
                     "chat template spells its turn markers)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e);
      return kExitOk;
    }
    std::cerr << "error: " << e.what() << "\n" << "(see tessera --help)\n";
    return kExitBadInput;
  }
  cluster.json = output == "json";
  if (run_cmd->parsed()) return RunLocal(run);
  if (certs_init->parsed()) return CertsInitCommand(certs);
  if (certs_issue->parsed()) return CertsIssueCommand(certs);
  if (certs_show->parsed()) return CertsShowCommand(certs_show_path);
  for (CLI::App* c : {submit, jobs, job, cancel, follow_cmd, workers, logs}) {
    if (c->parsed() && !PrepareConnection(tls_files, insecure, &cluster)) return kExitBadInput;
  }
  if (plan->parsed() && local_plan.devices == -1 && !PrepareConnection(tls_files, insecure, &cluster)) return kExitBadInput;
  if (submit->parsed()) return SubmitCommand(cluster, submit_spec, submit_sets, max_restarts, follow);
  if (jobs->parsed()) return JobsCommand(cluster);
  if (job->parsed()) return JobCommand(cluster, job_id);
  if (cancel->parsed()) return CancelCommand(cluster, job_id);
  if (follow_cmd->parsed()) return FollowCommand(cluster, job_id);
  if (workers->parsed()) return release_key.empty() ? WorkersCommand(cluster) : ReleaseWorkerKeyCommand(cluster, release_key);
  if (plan->parsed() && local_plan.devices != -1) {
    local_plan.spec_path = submit_spec;
    local_plan.overrides = submit_sets;
    local_plan.json = cluster.json;
    return LocalPlanCommand(local_plan);
  }
  if (plan->parsed()) return PlanCommand(cluster, submit_spec, submit_sets);
  if (logs->parsed()) return LogsCommand(cluster, job_id, log_rank, log_follow);
  if (export_cmd->parsed()) return ExportCommand(export_options);
  if (prepare->parsed() && prepare_prompts) {
    if (prepare_options.tokenizer.empty() || prepare_options.append_eos || !prepare_options.eos_token.empty()) {
      std::cerr << "error: data prepare --prompts needs --tokenizer (a directory with tokenizer.json and, for "
                   "conversations, its chat template) and takes no --append-eos or --eos-token\n";
      return kExitBadInput;
    }
    PromptPrepareOptions po;
    po.tokenizer = prepare_options.tokenizer;
    po.output_prefix = prepare_paths.back();
    po.inputs.assign(prepare_paths.begin(), prepare_paths.end() - 1);
    po.progress = !no_progress;
    auto report = PreparePrompts(po);
    if (!report.ok()) {
      std::cerr << "error: " << report.status().message() << "\n";
      return kExitBadInput;
    }
    std::printf("wrote %s.bin, .idx, .fields.jsonl, .tokenizer.json and .prompts.json: %lld prompts, %lld tokens (%s), the longest "
                "%lld, in %.1f s\n",
                po.output_prefix.c_str(), static_cast<long long>(report->prompts),
                static_cast<long long>(report->tokens), report->dtype.c_str(), static_cast<long long>(report->longest),
                report->seconds);
    return kExitOk;
  }
  if (prepare->parsed() && prepare_preference) {
    if (prepare_options.tokenizer.empty() || prepare_options.append_eos || !prepare_options.eos_token.empty()) {
      std::cerr << "error: data prepare --preference needs --tokenizer (a directory with tokenizer.json and, for "
                   "conversations, its chat template) and takes no --append-eos or --eos-token\n";
      return kExitBadInput;
    }
    PreferencePrepareOptions pref;
    pref.tokenizer = prepare_options.tokenizer;
    pref.output_prefix = prepare_paths.back();
    pref.inputs.assign(prepare_paths.begin(), prepare_paths.end() - 1);
    pref.progress = !no_progress;
    auto report = PreparePreference(pref);
    if (!report.ok()) {
      std::cerr << "error: " << report.status().message() << "\n";
      return kExitBadInput;
    }
    std::printf("wrote %s.bin, .idx, %s.pref.json: %lld pairs, %lld tokens (%s): %lld in prompts, %lld in "
                "completions, in %.1f s\n",
                pref.output_prefix.c_str(), report->margins ? ".pref.margin and " : "",
                static_cast<long long>(report->pairs), static_cast<long long>(report->tokens), report->dtype.c_str(),
                static_cast<long long>(report->prompt_tokens), static_cast<long long>(report->completion_tokens),
                report->seconds);
    return kExitOk;
  }
  if (prepare->parsed() && prepare_chat) {
    if (prepare_options.tokenizer.empty() || prepare_options.append_eos || !prepare_options.eos_token.empty()) {
      std::cerr << "error: data prepare --chat needs --tokenizer (a directory with tokenizer.json and its chat "
                   "template) and takes no --append-eos or --eos-token\n";
      return kExitBadInput;
    }
    ChatPrepareOptions chat;
    chat.tokenizer = prepare_options.tokenizer;
    chat.output_prefix = prepare_paths.back();
    chat.inputs.assign(prepare_paths.begin(), prepare_paths.end() - 1);
    chat.progress = !no_progress;
    auto report = PrepareChat(chat);
    if (!report.ok()) {
      std::cerr << "error: " << report.status().message() << "\n";
      return kExitBadInput;
    }
    std::printf("wrote %s.bin, .idx, .sft.mask and .sft.json: %lld conversations, %lld tokens (%s), %lld trained "
                "(%.1f%%)%s in %.1f s\n",
                chat.output_prefix.c_str(), static_cast<long long>(report->conversations),
                static_cast<long long>(report->tokens), report->dtype.c_str(),
                static_cast<long long>(report->trained_tokens),
                100.0 * static_cast<double>(report->trained_tokens) / std::max<int64_t>(1, report->tokens),
                report->without_trained > 0
                    ? absl::StrCat("; ", report->without_trained, " conversation(s) have no assistant token").c_str()
                    : "",
                report->seconds);
    return kExitOk;
  }
  if (prepare->parsed()) {
    if (prepare_options.tokenizer.empty()) {
      if (prepare_paths.size() != 2 || prepare_options.append_eos || !prepare_options.eos_token.empty()) {
        std::cerr << "error: without --tokenizer, data prepare takes one INPUT and one OUTPUT file (byte-level tokens)"
                  << (prepare_options.append_eos ? "; --append-eos needs --tokenizer" : "") << "\n";
        return kExitBadInput;
      }
      auto n = PrepareByteTokens(prepare_paths[0], prepare_paths[1]);
      if (!n.ok()) {
        std::cerr << "error: " << n.status().message() << "\n";
        return kExitBadInput;
      }
      std::cout << "wrote " << *n << " tokens to " << prepare_paths[1] << " (uint16, byte-level, vocab 256)\n";
      return kExitOk;
    }
    prepare_options.output_prefix = prepare_paths.back();
    prepare_options.inputs.assign(prepare_paths.begin(), prepare_paths.end() - 1);
    prepare_options.progress = !no_progress;
    auto report = PrepareTokenized(prepare_options);
    if (!report.ok()) {
      std::cerr << "error: " << report.status().message() << "\n";
      return kExitBadInput;
    }
    std::printf("wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s), %.1f MB of text in %.1f s (%.1f MB/s)\n",
                prepare_options.output_prefix.c_str(), prepare_options.output_prefix.c_str(),
                static_cast<long long>(report->documents), static_cast<long long>(report->tokens),
                report->dtype.c_str(), report->bytes / 1e6, report->seconds,
                report->bytes / 1e6 / std::max(report->seconds, 1e-9));
    return kExitOk;
  }
  if (samples->parsed()) return DataSamplesCommand(samples_spec, samples_sets, samples_from, samples_count);
  if (render_chat->parsed()) {
    if (absl::Status s = RenderChatCommand(chat_tokenizer, chat_inputs, chat_generation_prompt); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return kExitBadInput;
    }
    return kExitOk;
  }
  if (tokenize->parsed()) {
    if (absl::Status s = TokenizeCommand(tokenize_tokenizer, tokenize_texts, tokenize_inputs, tokenize_key,
                                       tokenize_pieces, tokenize_special); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return kExitBadInput;
    }
    return kExitOk;
  }
  return kExitBadInput;
}

}  // namespace
}  // namespace tessera::client

int main(int argc, char** argv) { return tessera::client::Main(argc, argv); }
