//! The Kafka client idemgate is built with: every codec a producer may
//! choose, and the security a real cluster asks for, compiled in (librdkafka
//! reports what it was built with in `builtin.features`). A build without
//! zstd, say, reads a zstd topic as `Decompression (codec 0x4) failed: Not
//! implemented` at the first fetch, long after start.

use std::ffi::{CStr, CString};

fn builtin_features() -> String {
    let name = CString::new("builtin.features").expect("property name");
    let mut buffer = vec![0u8; 1024];
    let mut size = buffer.len();
    // SAFETY: a fresh configuration object, read into a buffer of `size`
    // bytes, then destroyed; nothing outlives this block.
    unsafe {
        let conf = rdkafka::bindings::rd_kafka_conf_new();
        let result = rdkafka::bindings::rd_kafka_conf_get(
            conf,
            name.as_ptr(),
            buffer.as_mut_ptr().cast(),
            &mut size,
        );
        rdkafka::bindings::rd_kafka_conf_destroy(conf);
        assert_eq!(
            result,
            rdkafka::bindings::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK,
            "builtin.features unreadable"
        );
    }
    CStr::from_bytes_until_nul(&buffer)
        .expect("a C string")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_codec_and_sasl_over_tls_are_built_in() {
    let features = builtin_features();
    let have: Vec<&str> = features.split(',').collect();
    for feature in [
        "gzip",
        "snappy",
        "lz4",
        "zstd",
        "ssl",
        "sasl_plain",
        "sasl_scram",
    ] {
        assert!(
            have.contains(&feature),
            "librdkafka lacks {feature}: builtin.features = {features}"
        );
    }
}
