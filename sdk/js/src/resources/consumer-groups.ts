import { seg } from '../core/api-client.js';
import { APIResource } from '../core/resource.js';
import type {
  ConsumerGroup,
  ConsumerGroupSummary,
  GroupPause,
  GroupUpdateParams,
  PartitionPosition,
  PushAttempt,
  RequestOptions,
} from '../types.js';

export function groupPath(topic: string, group?: string): string {
  const path = `/v1/topics/${seg(topic)}/groups`;
  return group === undefined ? path : `${path}/${seg(group)}`;
}

/** List, describe, update and delete consumer groups; reset a stopped group's offsets. */
export class ConsumerGroups extends APIResource {
  /** The topic's groups: `[{name, consumers, lag}]`. */
  async list(topic: string, options?: RequestOptions): Promise<ConsumerGroupSummary[]> {
    const page = await this.client.requestObject<{ data: ConsumerGroupSummary[] }>({
      method: 'GET',
      path: groupPath(topic),
      ...options,
    });
    return page.data;
  }

  /** A group: per partition its consumer, committed offset and lag; and its config. */
  describe(topic: string, group: string, options?: RequestOptions): Promise<ConsumerGroup> {
    return this.client.requestObject<ConsumerGroup>({ method: 'GET', path: groupPath(topic, group), ...options });
  }

  /** Create the group, or merge the settings given into its config (`deadLetter: null` removes the DLQ). */
  update(topic: string, group: string, params: GroupUpdateParams = {}, options?: RequestOptions): Promise<ConsumerGroup> {
    return this.client.requestObject<ConsumerGroup>({
      method: 'PUT',
      path: groupPath(topic, group),
      body: params,
      ...options,
    });
  }

  /** Delete a group (`ConflictError` GROUP_ACTIVE while consumers are connected). */
  async delete(topic: string, group: string, options?: RequestOptions): Promise<void> {
    await this.client.request({ method: 'DELETE', path: groupPath(topic, group), ...options });
  }

  /**
   * Move a stopped group to `earliest`, `latest` or an offset, on every partition (`ConflictError`
   * GROUP_ACTIVE while consumers are connected; `offsets.reset` works while consuming).
   */
  async resetOffsets(
    topic: string,
    group: string,
    params: { to: 'earliest' | 'latest' | number },
    options?: RequestOptions,
  ): Promise<PartitionPosition[]> {
    const answer = await this.client.requestObject<{ data: PartitionPosition[] }>({
      method: 'POST',
      path: `${groupPath(topic, group)}/reset-offsets`,
      body: { to: params.to },
      ...options,
    });
    return answer.data;
  }

  /** A new signing secret for a push group, answered once; the previous one keeps signing for 24 h. */
  rotatePushSecret(topic: string, group: string, options?: RequestOptions): Promise<{ secret: string }> {
    return this.client.requestObject<{ secret: string }>({
      method: 'POST',
      path: `${groupPath(topic, group)}/push/rotate-secret`,
      ...options,
    });
  }

  /** A push group's most recent POSTs, newest first (`limit` 1 to 1000, default 50). */
  async pushAttempts(
    topic: string,
    group: string,
    params: { limit?: number } = {},
    options?: RequestOptions,
  ): Promise<PushAttempt[]> {
    const answer = await this.client.requestObject<{ data: PushAttempt[] }>({
      method: 'GET',
      path: `${groupPath(topic, group)}/push/attempts`,
      query: { limit: params.limit },
      ...options,
    });
    return answer.data;
  }

  /**
   * Pause the group: no member receives messages (within a second, on every server) until `until` (a
   * `Date`, ISO-8601 or epoch milliseconds) or `resume`; acks, nacks and extends still work.
   */
  pause(
    topic: string,
    group: string,
    params: { until?: Date | string | number } = {},
    options?: RequestOptions,
  ): Promise<GroupPause> {
    const until = params.until instanceof Date ? params.until.toISOString() : params.until;
    return this.client.requestObject<GroupPause>({
      method: 'POST',
      path: `${groupPath(topic, group)}/pause`,
      body: until === undefined ? {} : { until },
      ...options,
    });
  }

  /** End the group's pause (a user's or the DLQ breaker's). */
  resume(topic: string, group: string, options?: RequestOptions): Promise<GroupPause> {
    return this.client.requestObject<GroupPause>({
      method: 'POST',
      path: `${groupPath(topic, group)}/resume`,
      ...options,
    });
  }
}
