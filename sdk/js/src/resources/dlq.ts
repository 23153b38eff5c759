import { seg } from '../core/api-client.js';
import { APIResource } from '../core/resource.js';
import type { AuditPage, DeadLetterPage, ReplayAllResult, ReplayResult, RequestOptions } from '../types.js';
import { groupPath } from './consumer-groups.js';

const dlqPath = (topic: string, group: string) => `${groupPath(topic, group)}/dlq`;

/** A group's dead-letter queue: inspect, replay, replay all, delete, audit. */
export class Dlq extends APIResource {
  /** One page of the group's dead letters, oldest first, with `total` (page on with `cursor: nextCursor`). */
  inspect<T = any>(
    topic: string,
    params: { group: string; limit?: number; cursor?: string },
    options?: RequestOptions,
  ): Promise<DeadLetterPage<T>> {
    return this.client.requestObject<DeadLetterPage<T>>({
      method: 'GET',
      path: dlqPath(topic, params.group),
      query: { limit: params.limit, cursor: params.cursor },
      ...options,
    });
  }

  /** Send one dead letter back to this group (same id, partition and offset; attempt 1, fresh retries). */
  replay(topic: string, group: string, params: { messageId: string }, options?: RequestOptions): Promise<ReplayResult> {
    return this.client.requestObject<ReplayResult>({
      method: 'POST',
      path: `${dlqPath(topic, group)}/replay`,
      body: { messageId: params.messageId },
      ...options,
    });
  }

  /** Send every dead letter back to this group, throttled to `rate` messages per second if given. */
  replayAll(topic: string, group: string, params: { rate?: number } = {}, options?: RequestOptions): Promise<ReplayAllResult> {
    const body = params.rate === undefined ? {} : { rate: params.rate };
    return this.client.requestObject<ReplayAllResult>({
      method: 'POST',
      path: `${dlqPath(topic, group)}/replay-all`,
      body,
      ...options,
    });
  }

  /** Drop one dead letter for good. */
  async delete(topic: string, group: string, params: { messageId: string }, options?: RequestOptions): Promise<void> {
    await this.client.request({ method: 'DELETE', path: `${dlqPath(topic, group)}/${seg(params.messageId)}`, ...options });
  }

  /** Who replayed or deleted what, and when. */
  audit(topic: string, group: string, params: { limit?: number; cursor?: string } = {}, options?: RequestOptions): Promise<AuditPage> {
    return this.client.requestObject<AuditPage>({
      method: 'GET',
      path: `${dlqPath(topic, group)}/audit`,
      query: { limit: params.limit, cursor: params.cursor },
      ...options,
    });
  }
}
