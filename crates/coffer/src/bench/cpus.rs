//! Where a bench's processes run: `--cluster-cpus` puts the fresh cluster's daemons on some
//! CPUs and `--client-cpus` the clients (this process, and the workers and fio it starts)
//! on others, as when the clients are other hosts. Without them every process may run on
//! every CPU, and what a client spends (sealing at the edge, say) is taken from the
//! cluster's share of the machine.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::OnceLock;

/// The placement this bench runs with, once the clients were pinned (for the header and
/// the JSON).
static PLACEMENT: OnceLock<String> = OnceLock::new();

/// CPUs by number, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list as `taskset -c` takes it: `1`, `0-3`, `0,2-3`.
pub fn parse_cpus(text: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{text:?} is not a CPU list such as 1, 0-3 or 0,2-3"))
        };
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (number(first)?, number(last)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(format!("CPU range {part:?} runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    let online = online_cpus()?;
    if let Some(missing) = cpus.iter().find(|cpu| !online.contains(cpu)) {
        return Err(format!(
            "CPU {missing} is not one this process may run on (it may use {})",
            describe(&online)
        ));
    }
    Ok(CpuList(cpus))
}

/// `0-1,3` for [0, 1, 3].
pub fn describe(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Pins this process (its threads from now on, and every process it starts) to `client`,
/// and records the placement; call before any thread is started.
pub fn place(cluster: Option<&[usize]>, client: Option<&[usize]>) -> Result<(), String> {
    if let Some(cpus) = client {
        let set = cpu_set(cpus);
        // SAFETY: sched_setaffinity(2) on this thread with a set built by cpu_set.
        let done = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        if done != 0 {
            return Err(format!(
                "pinning the clients to CPUs {}: {}",
                describe(cpus),
                std::io::Error::last_os_error()
            ));
        }
        check(0, cpus)?;
    }
    if cluster.is_some() || client.is_some() {
        let all = |cpus: Option<&[usize]>| {
            cpus.map_or("any CPU".to_string(), |c| format!("CPUs {}", describe(c)))
        };
        let placement = format!("cluster on {}, clients on {}", all(cluster), all(client));
        let _ = PLACEMENT.set(placement);
    }
    Ok(())
}

/// The placement, if the bench was given one.
pub fn placement() -> Option<&'static str> {
    PLACEMENT.get().map(String::as_str)
}

/// Makes `command` start on `cpus` (its children inherit them).
pub fn pin(command: &mut Command, cpus: &[usize]) {
    let set = cpu_set(cpus);
    // SAFETY: the closure runs between fork and exec and only makes one system call on a
    // set built before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Checks that process `pid` (0: this thread) runs on exactly `cpus`.
pub fn check(pid: u32, cpus: &[usize]) -> Result<(), String> {
    let found = affinity(pid as libc::pid_t)?;
    if found != cpus {
        return Err(format!(
            "process {pid} runs on CPUs {}, not {}",
            describe(&found),
            describe(cpus)
        ));
    }
    Ok(())
}

fn online_cpus() -> Result<Vec<usize>, String> {
    affinity(0)
}

fn affinity(pid: libc::pid_t) -> Result<Vec<usize>, String> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity(2) writes at most size_of(set) bytes into set.
    let done = unsafe { libc::sched_getaffinity(pid, std::mem::size_of_val(&set), &mut set) };
    if done != 0 {
        return Err(format!(
            "reading the CPUs of process {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: CPU_ISSET reads the set for CPU numbers below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|cpu| unsafe { libc::CPU_ISSET(*cpu, &set) })
        .collect())
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus {
        // SAFETY: parse_cpus only returns CPUs this process may run on, below CPU_SETSIZE.
        unsafe { libc::CPU_SET(*cpu, &mut set) };
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_taskset_reads_them_and_print_back() {
        let online = online_cpus().expect("affinity");
        let all = describe(&online);
        assert_eq!(parse_cpus(&all).expect("all online CPUs").0, online);
        assert_eq!(describe(&[0, 1, 3, 5, 6, 7]), "0-1,3,5-7");
        assert!(parse_cpus("1-0").is_err());
        assert!(parse_cpus("x")
            .expect_err("not a list")
            .contains("CPU list"));
        assert!(parse_cpus("100000")
            .expect_err("no such CPU")
            .contains("may run on"));
    }
}
