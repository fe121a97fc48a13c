//! How many members a consumer group has, as its coordinator tells it:
//! the worker asks while it waits for an assignment, the operator's
//! `reset` and `rebuild` before they write (they refuse while the group has
//! any).

use rdkafka::client::ClientContext;

/// Why a group's member count is unknown.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    #[error("{0}")]
    GroupName(std::ffi::NulError),
    #[error("no answer in time")]
    NoAnswer,
    /// librdkafka's or the coordinator's error, as it words it.
    #[error("{0}")]
    Kafka(String),
    #[error("not a DescribeConsumerGroups result")]
    NotDescribeResult,
    #[error("{0} groups described, not 1")]
    GroupCount(usize),
}

/// How many members `group` has, as its coordinator tells it, through
/// librdkafka's DescribeConsumerGroups: that asks with ConsumerGroupDescribe
/// (the request of KIP-848 groups, `group.protocol = "consumer"`) and falls
/// back to the classic DescribeGroups for classic groups. The classic
/// request alone (rdkafka's `fetch_group_list`) lists no member of a
/// KIP-848 group. A group the coordinator does not know has none.
pub(crate) fn group_members<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    group: &str,
    timeout: std::time::Duration,
) -> Result<usize, MembersError> {
    use rdkafka::bindings as rd;
    let group_c = std::ffi::CString::new(group).map_err(MembersError::GroupName)?;
    let mut groups = [group_c.as_ptr()];
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `rk` is the live client `client` holds; the options, queue
    // and event made here are destroyed here, after the last read of what
    // they own; `groups` points at `group_c`, alive until the call returns
    // (librdkafka copies the names).
    unsafe {
        let rk = client.native_ptr();
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        );
        let mut errstr = [0 as std::ffi::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeConsumerGroups(rk, groups.as_mut_ptr(), 1, options, queue);
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms.saturating_add(1_000));
        let members = members_in(event);
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        members
    }
}

/// The member count of the one group a DescribeConsumerGroups result
/// describes.
///
/// # Safety
/// `event` is null or a live event from the queue of a
/// DescribeConsumerGroups request for one group.
unsafe fn members_in(
    event: *mut rdkafka::bindings::rd_kafka_event_t,
) -> Result<usize, MembersError> {
    use rdkafka::bindings as rd;
    let text = |s: *const std::ffi::c_char| {
        if s.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned()
        }
    };
    if event.is_null() {
        return Err(MembersError::NoAnswer);
    }
    if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(MembersError::Kafka(text(rd::rd_kafka_event_error_string(
            event,
        ))));
    }
    let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event);
    if result.is_null() {
        return Err(MembersError::NotDescribeResult);
    }
    let mut count = 0;
    let groups = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
    if groups.is_null() || count != 1 {
        return Err(MembersError::GroupCount(count));
    }
    let description = *groups;
    let error = rd::rd_kafka_ConsumerGroupDescription_error(description);
    if !error.is_null() {
        if rd::rd_kafka_error_code(error)
            == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND
        {
            return Ok(0);
        }
        return Err(MembersError::Kafka(text(rd::rd_kafka_error_string(error))));
    }
    Ok(rd::rd_kafka_ConsumerGroupDescription_member_count(
        description,
    ))
}
