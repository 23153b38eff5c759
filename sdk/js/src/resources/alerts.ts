import { APIResource } from '../core/resource.js';
import type { AlertDeliveryPage, AlertEndpoint, AlertTestEvent, RequestOptions } from '../types.js';

const ENDPOINT = '/v1/alerts/endpoint';

/** The project's alert webhook: DLQ depth alerts, signed with `QueueCore-Signature`. */
export class Alerts extends APIResource {
  /** Set the endpoint; without `secret`, one is generated and shown in this answer only. */
  set(params: { url: string; secret?: string }, options?: RequestOptions): Promise<AlertEndpoint> {
    return this.client.requestObject<AlertEndpoint>({ method: 'PUT', path: ENDPOINT, body: params, ...options });
  }

  get(options?: RequestOptions): Promise<AlertEndpoint> {
    return this.client.requestObject<AlertEndpoint>({ method: 'GET', path: ENDPOINT, ...options });
  }

  async delete(options?: RequestOptions): Promise<void> {
    await this.client.request({ method: 'DELETE', path: ENDPOINT, ...options });
  }

  /** Queue a signed `test` event to the endpoint. */
  sendTestEvent(options?: RequestOptions): Promise<AlertTestEvent> {
    return this.client.requestObject<AlertTestEvent>({ method: 'POST', path: `${ENDPOINT}/test`, ...options });
  }

  /** Delivery attempts, newest first. */
  deliveries(params: { limit?: number; cursor?: string } = {}, options?: RequestOptions): Promise<AlertDeliveryPage> {
    return this.client.requestObject<AlertDeliveryPage>({
      method: 'GET',
      path: '/v1/alerts/deliveries',
      query: { limit: params.limit, cursor: params.cursor },
      ...options,
    });
  }
}
