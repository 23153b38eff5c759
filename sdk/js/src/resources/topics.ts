import { seg, expectObject } from '../core/api-client.js';
import { PagedList } from '../core/pagination.js';
import { APIResource } from '../core/resource.js';
import type {
  ListParams,
  Page,
  RequestOptions,
  Topic,
  TopicCreateParams,
  TopicDetail,
  TopicUpdateParams,
} from '../types.js';

/** Create, list, describe, update and delete topics. */
export class Topics extends APIResource {
  /**
   * Create a topic: `{name, retention = '7d', delivery = 'exactly-once', partitions = 3, replicas}` (replicas:
   * 1, 3 or 5; default 3 on the JetStream engine, 1 on the local engine).
   */
  create(params: TopicCreateParams, options?: RequestOptions): Promise<Topic> {
    return this.client.requestObject<Topic>({ method: 'POST', path: '/v1/topics', body: params, ...options });
  }

  /** Every topic of the key's environment: `await` it for an array, or `for await` it page by page. */
  list(params: ListParams = {}, options?: RequestOptions): PagedList<Topic> {
    return new PagedList(async (cursor) => {
      const response = await this.client.request<unknown>({
        method: 'GET',
        path: '/v1/topics',
        query: { limit: params.limit, cursor },
        ...options,
      });
      const page = expectObject<Page<Topic>>(response);
      return { data: page.data ?? [], nextCursor: page.nextCursor ?? null };
    }, params.cursor);
  }

  /** A topic with its partitions' offsets, message counts and sizes. */
  describe(name: string, options?: RequestOptions): Promise<TopicDetail> {
    return this.client.requestObject<TopicDetail>({ method: 'GET', path: `/v1/topics/${seg(name)}`, ...options });
  }

  /** Change retention, or increase partitions (never decrease). */
  update(name: string, params: TopicUpdateParams, options?: RequestOptions): Promise<Topic> {
    return this.client.requestObject<Topic>({
      method: 'PATCH',
      path: `/v1/topics/${seg(name)}`,
      body: params,
      ...options,
    });
  }

  /** Delete a topic: its messages, groups and DLQs go with it. */
  async delete(name: string, options?: RequestOptions): Promise<void> {
    await this.client.request({ method: 'DELETE', path: `/v1/topics/${seg(name)}`, ...options });
  }
}
