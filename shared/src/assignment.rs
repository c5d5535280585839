//! Which live worker should own which partition.
//!
//! Every worker computes the same assignment from the same inputs (the
//! partition count and the set of live worker ids it sees in the lease
//! bucket), so no coordinator is needed: a worker claims what is assigned to
//! it and hands over what is not. The assignment is *balanced rendezvous
//! hashing*: each partition ranks the workers by a hash of (worker, partition)
//! and goes to the best-ranked worker that still has room: every worker may
//! take ⌊partitions / workers⌋, and the first `partitions mod workers` to
//! fill up may take one more. Rendezvous ranking keeps moves small when a
//! worker joins or leaves (mostly the partitions that rank the newcomer first
//! move); the caps keep the shares within one partition of each other.

/// The owner index (into `workers`, sorted or not) for every partition `0..partitions`.
/// Empty `workers` gives an empty assignment.
pub fn assign<S: AsRef<str>>(partitions: u32, workers: &[S]) -> Vec<usize> {
    if workers.is_empty() {
        return Vec::new();
    }
    let floor = partitions as usize / workers.len();
    let mut extra = partitions as usize % workers.len();
    let mut load = vec![0usize; workers.len()];
    let mut ranked: Vec<(u64, usize)> = Vec::with_capacity(workers.len());
    (0..partitions)
        .map(|p| {
            ranked.clear();
            ranked.extend(
                workers
                    .iter()
                    .enumerate()
                    .map(|(i, w)| (score(w.as_ref(), p), i)),
            );
            // Highest score first; ties (practically impossible) by id for determinism.
            ranked.sort_unstable_by(|a, b| {
                b.0.cmp(&a.0)
                    .then_with(|| workers[a.1].as_ref().cmp(workers[b.1].as_ref()))
            });
            let owner = ranked
                .iter()
                .map(|&(_, i)| i)
                .find(|&i| load[i] < floor || (load[i] == floor && extra > 0))
                .unwrap_or(ranked[0].1);
            if load[owner] == floor {
                extra -= 1;
            }
            load[owner] += 1;
            owner
        })
        .collect()
}

/// The partitions assigned to `me` among `workers`.
pub fn partitions_of<S: AsRef<str>>(partitions: u32, workers: &[S], me: &str) -> Vec<u32> {
    let owners = assign(partitions, workers);
    owners
        .iter()
        .enumerate()
        .filter(|&(_, &w)| workers[w].as_ref() == me)
        .map(|(p, _)| p as u32)
        .collect()
}

fn score(worker: &str, partition: u32) -> u64 {
    // FNV-1a 64 over the id and the partition, then a splitmix64 finaliser
    // so that similar ids still spread evenly.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in worker.bytes().chain(partition.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(partitions: u32, workers: &[&str]) -> Vec<usize> {
        let mut counts = vec![0; workers.len()];
        for w in assign(partitions, workers) {
            counts[w] += 1;
        }
        counts
    }

    #[test]
    fn shares_differ_by_at_most_one() {
        for n in 1..=9 {
            let ids: Vec<String> = (0..n).map(|i| format!("worker-{i}")).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            for partitions in [1, 7, 64, 256, 1024] {
                let s = shares(partitions, &ids);
                assert_eq!(s.iter().sum::<usize>(), partitions as usize);
                let (min, max) = (s.iter().min().unwrap(), s.iter().max().unwrap());
                assert!(
                    max - min <= 1,
                    "{n} workers, {partitions} partitions: {s:?}"
                );
            }
        }
    }

    #[test]
    fn same_inputs_same_assignment_in_any_order() {
        let a = ["a1", "b2", "c3"];
        let b = ["c3", "a1", "b2"];
        let names = |ws: &[&str]| -> Vec<String> {
            assign(64, ws)
                .into_iter()
                .map(|i| ws[i].to_string())
                .collect()
        };
        assert_eq!(names(&a), names(&b));
    }

    #[test]
    fn a_joining_worker_moves_few_partitions() {
        let before = ["w-a", "w-b", "w-c"];
        let after = ["w-a", "w-b", "w-c", "w-d"];
        let ob = assign(64, &before);
        let oa = assign(64, &after);
        let moved_between_old = (0..64)
            .filter(|&p| after[oa[p]] != "w-d" && before[ob[p]] != after[oa[p]])
            .count();
        let to_new = oa.iter().filter(|&&i| after[i] == "w-d").count();
        assert_eq!(to_new, 16);
        // Rendezvous ranking keeps most partitions where they were; the cap
        // causes a few cascades among the old workers.
        assert!(
            moved_between_old <= 12,
            "{moved_between_old} moved among old workers"
        );
    }

    #[test]
    fn no_workers_no_assignment() {
        assert!(assign::<&str>(64, &[]).is_empty());
        assert_eq!(partitions_of(4, &["only"], "only"), vec![0, 1, 2, 3]);
    }
}
