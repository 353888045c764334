//! `coffer bench`: measurements of Coffer itself. Each bench prints the command it ran, the
//! configuration and the machine, then its figures; `--json` writes the same cells.

mod aead;
mod cluster;
mod cpus;
mod ec;
mod files;
mod fresh;
mod image;
mod latency;
mod mac;
mod matrix;
mod memcpy;
mod pool_type;
mod report;
mod s3;
mod store;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// AES-256-GCM as the data path runs it, in both libraries this build carries (aws-lc-rs
    /// and ring), sealing and opening 4 KiB and 64 KiB chunks on one core: the check of which
    /// one this CPU was given.
    Aead(aead::AeadArgs),
    /// The check of a data segment sent open (edge-sealed chunks): GMAC as the messenger
    /// makes it, against Poly1305 and keyed BLAKE3, and a `crc` link's CRC32C, over 4 KiB,
    /// 64 KiB and 4 MiB segments on one core: the check of which MAC is fastest on this CPU.
    Mac(mac::MacArgs),
    /// This process's memcpy by where the destination lies past the source modulo 64, on
    /// one core: the check of copying without glibc's `rep movsb` on AMD (run it as well
    /// with `GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2048` for glibc's own choice).
    Memcpy(memcpy::MemcpyArgs),
    /// The erasure code as an OSD runs it, on one core: 4 MiB objects encoded and rebuilt
    /// (one and m data shards lost) and 4 KiB overwrites' parity deltas, per profile (4+2 and
    /// 8+3) and stripe unit, with the space stored per GiB.
    Ec(ec::EcArgs),
    /// The local object store in every at-rest mode: 4 KiB and 4 MiB random reads and
    /// writes at queue depth 1 and high, each cell as a percent of `none` in the same run.
    Store(store::StoreArgs),
    /// A whole cluster (`coffer up`) per corner of at-rest none|gcm x in-transit crc|secure:
    /// clients putting and getting 4 KiB and 4 MiB objects, each cell as a percent of
    /// none/crc in the same run, with the cluster's CPU seconds per GiB.
    Cluster(cluster::ClusterArgs),
    /// An image per configuration (none|gcm at rest x crc|secure in transit), driven as the
    /// NBD server drives it: random 4 KiB and 4 MiB reads and writes at queue depth 1 and
    /// 128, each cell as a percent of the first configuration in the same run.
    Image(image::ImageArgs),
    /// The published encryption matrix on Coffer: fresh clusters per configuration (at rest
    /// x in transit), random 4 MiB and 4 KiB reads and writes by many clients, one client at
    /// queue depth 128 and one synchronous client, each cell a percent of the baseline.
    Matrix(matrix::MatrixArgs),
    /// The file system through sysbench's fileio test on a mount: sequential 1 MiB and
    /// random 4 KiB reads and writes by one thread, reads with each readahead setting (auto
    /// against the extremes), on a fresh cluster per configuration (none/crc, the default).
    Fs(files::FsArgs),
    /// The S3 gateway: concurrent clients doing PUT and GET of 4 MiB and 64 KiB objects over
    /// plain HTTP and TLS, without SSE, with SSE-S3 and with SSE-C, each cell a percent of
    /// plain HTTP without SSE in the same run, with the gateway's CPU per GiB.
    S3(s3::S3Args),
    /// Where the time of one synchronous 4 KiB write, and of one 4 KiB read, goes: the
    /// disk's own write and fdatasync and its read, then per configuration a fresh
    /// cluster's client round trip, the OSD's write as primary, a replica's answer and its
    /// own part, the store's apply and its group commit, the OSD's read as primary, each
    /// against the disk.
    Latency(latency::LatencyArgs),
    /// One client process of `coffer bench matrix` (started by it).
    #[command(hide = true)]
    Worker(matrix::worker::WorkerArgs),
}

pub fn run(command: BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Aead(args) => aead::run(args),
        BenchCommand::Mac(args) => mac::run(args),
        BenchCommand::Memcpy(args) => memcpy::run(args),
        BenchCommand::Ec(args) => ec::run(args),
        BenchCommand::Store(args) => store::run(args),
        BenchCommand::Cluster(args) => cluster::run(args),
        BenchCommand::Image(args) => image::run(args),
        BenchCommand::Matrix(args) => matrix::run(args),
        BenchCommand::S3(args) => s3::run(args),
        BenchCommand::Fs(args) => files::run(args),
        BenchCommand::Latency(args) => latency::run(args),
        BenchCommand::Worker(args) => matrix::worker::run(args),
    }
}
