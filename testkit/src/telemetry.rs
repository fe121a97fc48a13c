//! Vehicle telemetry for tiered streams: one reading a minute per vehicle
//! (position, speed, the time it was taken), keyed by vehicle so a
//! vehicle's readings share a partition. A vehicle that loses its link
//! sends readings again byte for byte when it reconnects: some soon after
//! the first (tier 1 still knows them), some late (only the filter does).
//! Every reading is fingerprinted by the library with the `payload` profile,
//! as the oracle.

use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::workload::{Kind, Planned};

/// Generates readings in rounds; later rounds may re-send readings of
/// earlier ones.
pub struct Telemetry {
    tag: String,
    rng: StdRng,
    vehicles: usize,
    /// The payload of every reading so far, by event index.
    readings: Vec<(String, Vec<u8>)>,
    next_id: u64,
    /// Minutes the earlier rounds covered: a round goes on from there, so
    /// no two readings of a vehicle share a `seq`.
    minutes_done: usize,
    profile: Profile,
}

impl Telemetry {
    /// `tag` keeps vehicle ids apart between tests; the seed is printed so
    /// a failure replays (`with_seed`).
    pub fn new(tag: &str, vehicles: usize) -> Telemetry {
        let seed = rand::random::<u64>();
        println!("[{tag}] telemetry seed {seed}");
        Telemetry::with_seed(tag, vehicles, seed)
    }

    pub fn with_seed(tag: &str, vehicles: usize, seed: u64) -> Telemetry {
        Telemetry {
            tag: tag.to_string(),
            rng: StdRng::seed_from_u64(seed),
            vehicles: vehicles.max(1),
            readings: Vec::new(),
            next_id: 0,
            minutes_done: 0,
            profile: Profile::resolve("payload", None, None).expect("payload profile"),
        }
    }

    pub fn events(&self) -> usize {
        self.readings.len()
    }

    /// `minutes` new readings per vehicle (the minutes after the earlier
    /// rounds'), a fraction `resend` of them sent again within the next few
    /// records (a flapping link).
    pub fn round(&mut self, minutes: usize, resend: f64) -> Vec<Planned> {
        let mut slots: Vec<(u64, Planned)> = Vec::new();
        let first = self.minutes_done;
        self.minutes_done += minutes;
        for minute in first..first + minutes {
            for vehicle in 0..self.vehicles {
                let event = self.new_reading(vehicle, minute);
                let at = (slots.len() as u64) * 10;
                slots.push((at, self.record(event, Kind::Original)));
                if self.rng.gen_bool(resend) {
                    let later = at + self.rng.gen_range(1..=100);
                    slots.push((later, self.record(event, Kind::Copy)));
                }
            }
        }
        // Stable: an original keeps its place before its re-sends.
        slots.sort_by_key(|(at, _)| *at);
        slots.into_iter().map(|(_, record)| record).collect()
    }

    /// `count` readings of earlier rounds sent again (a vehicle back after
    /// hours offline), each at most once.
    pub fn resend_earlier(&mut self, count: usize) -> Vec<Planned> {
        let mut events: Vec<usize> = (0..self.readings.len()).collect();
        let mut out = Vec::with_capacity(count.min(events.len()));
        for _ in 0..count.min(events.len()) {
            let pick = self.rng.gen_range(0..events.len());
            let event = events.swap_remove(pick);
            out.push(self.record(event, Kind::Copy));
        }
        out
    }

    fn new_reading(&mut self, vehicle: usize, minute: usize) -> usize {
        let id = format!("{}-veh-{vehicle:03}", self.tag);
        let payload = format!(
            r#"{{"vehicle_id":"{id}","seq":{minute},"lat":{:.5},"lon":{:.5},"speed_kmh":{},"recorded_at":"2024-03-01T{:02}:{:02}:00Z"}}"#,
            40.0 + self.rng.gen_range(0.0..0.1),
            -74.0 + self.rng.gen_range(0.0..0.1),
            self.rng.gen_range(0..130),
            minute / 60 % 24,
            minute % 60
        );
        self.readings.push((id, payload.into_bytes()));
        self.readings.len() - 1
    }

    fn record(&mut self, event: usize, kind: Kind) -> Planned {
        self.next_id += 1;
        let (vehicle, payload) = &self.readings[event];
        let view = RecordView {
            key: None,
            payload: Some(payload),
            headers: &[],
        };
        let hash = fingerprint(&self.profile, 1 << 20, &view)
            .map(|print| print.hash.to_string())
            .map_err(|invalid| invalid.code());
        Planned {
            event: Some(event),
            ..Planned::custom(
                format!("{}-t{}", self.tag, self.next_id),
                vehicle.as_bytes(),
                Some(payload),
                kind,
                hash,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resent_reading_is_its_original_byte_for_byte_and_hashes_alike() {
        let mut telemetry = Telemetry::with_seed("t", 4, 7);
        let first = telemetry.round(30, 0.5);
        let late = telemetry.resend_earlier(20);
        assert_eq!(telemetry.events(), 120);
        assert!(first.len() > 120, "no re-sends in {} records", first.len());
        assert_eq!(late.len(), 20);
        for copy in first.iter().chain(&late).filter(|p| p.kind == Kind::Copy) {
            let original = first
                .iter()
                .find(|p| p.kind == Kind::Original && p.event == copy.event)
                .expect("the original");
            assert_eq!(copy.payload, original.payload);
            assert_eq!(copy.key, original.key);
            assert!(copy.hash.is_ok() && copy.hash == original.hash);
        }
        let events: std::collections::BTreeSet<_> = late.iter().map(|p| p.event).collect();
        assert_eq!(events.len(), 20, "a late reading re-sent twice");
    }
}
