import { APIResource } from '../core/resource.js';
import { QueueCoreError } from '../core/error.js';
import type { Offset, PartitionOffset, PartitionPosition, RequestOptions, SeekResult } from '../types.js';
import { groupPath } from './consumer-groups.js';

const offsetsPath = (topic: string, group: string) => `${groupPath(topic, group)}/offsets`;

export type SeekParams =
  | { group: string; partition: number; offset: number; timestamp?: undefined }
  | { group: string; partition: number; timestamp: string | number | Date; offset?: undefined };

/** A consumer group's offsets: `current` (everything below is acked), `latest` (next to be written), `lag`. */
export class Offsets extends APIResource {
  /** With `partition`: that partition's `{current, latest, lag}`; without: one per partition. */
  get(topic: string, params: { group: string; partition: number }, options?: RequestOptions): Promise<Offset>;
  get(topic: string, params: { group: string; partition?: undefined }, options?: RequestOptions): Promise<PartitionOffset[]>;
  async get(
    topic: string,
    params: { group: string; partition?: number | undefined },
    options?: RequestOptions,
  ): Promise<Offset | PartitionOffset[]> {
    const answer = await this.client.requestObject<Offset | { data: PartitionOffset[] }>({
      method: 'GET',
      path: offsetsPath(topic, params.group),
      query: { partition: params.partition },
      ...options,
    });
    return params.partition === undefined ? (answer as { data: PartitionOffset[] }).data : (answer as Offset);
  }

  /**
   * Move a partition to an offset, or to the first message at or after a time; allowed while consuming.
   * An offset outside the partition's range is clamped: the answer says where it landed, and a warning
   * is logged when that differs from what was asked.
   */
  async seek(topic: string, params: SeekParams, options?: RequestOptions): Promise<SeekResult> {
    if ((params.offset === undefined) === (params.timestamp === undefined)) {
      throw new QueueCoreError('seek takes exactly one of offset and timestamp');
    }
    const body: Record<string, unknown> = { partition: params.partition };
    if (params.offset !== undefined) body['offset'] = params.offset;
    else body['timestamp'] = params.timestamp instanceof Date ? params.timestamp.toISOString() : params.timestamp;
    const result = await this.client.requestObject<SeekResult>({
      method: 'POST',
      path: `${offsetsPath(topic, params.group)}/seek`,
      body,
      ...options,
    });
    // An offset outside the partition's range is clamped into it: say so when it landed elsewhere.
    if (params.offset !== undefined && result.offset !== params.offset) {
      this.client.logger.warn(
        `seek ${topic}/${params.group} partition ${result.partition}: asked for offset ${params.offset}, ` +
          `landed at ${result.offset} (the partition's range ends there)`,
      );
    }
    return result;
  }

  /** Move to `earliest` (replay everything) or `latest` (only new messages); one partition or all. */
  async reset(
    topic: string,
    params: { group: string; to: 'earliest' | 'latest'; partition?: number },
    options?: RequestOptions,
  ): Promise<PartitionPosition[]> {
    const body: Record<string, unknown> = { to: params.to };
    if (params.partition !== undefined) body['partition'] = params.partition;
    const answer = await this.client.requestObject<{ data: PartitionPosition[] }>({
      method: 'POST',
      path: `${offsetsPath(topic, params.group)}/reset`,
      body,
      ...options,
    });
    return answer.data;
  }
}
